// The official openai Node SDK against the gateway: a chat stream and a
// Responses stream. Usage: node openai_streams.mjs BASE_URL KEY
// Prints a JSON object of what it saw, for the Rust test to assert on.
import OpenAI from "openai";

const [baseURL, apiKey] = process.argv.slice(2);
const client = new OpenAI({ baseURL, apiKey, maxRetries: 0 });
const seen = {};

const chat = await client.chat.completions.create({
  model: "quick",
  messages: [{ role: "user", content: "Tell me a story" }],
  stream: true,
  stream_options: { include_usage: true },
});
let text = "";
let usage = null;
for await (const chunk of chat) {
  text += chunk.choices[0]?.delta?.content ?? "";
  if (chunk.usage) usage = chunk.usage;
}
seen.chat = { text, completion_tokens: usage?.completion_tokens ?? null };

const responses = await client.responses.create({ model: "quick", input: "Tell me a story", stream: true });
let deltas = "";
let completed = null;
for await (const event of responses) {
  if (event.type === "response.output_text.delta") deltas += event.delta;
  if (event.type === "response.completed") completed = event.response;
}
seen.responses = { text: deltas, output_tokens: completed?.usage?.output_tokens ?? null };

console.log(JSON.stringify(seen));
