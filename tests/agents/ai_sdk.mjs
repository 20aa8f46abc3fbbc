// The Vercel AI SDK as an app uses it: generateText with a tool over two
// steps, every option at its default (the Responses API, `store` on, so the
// second step names the first step's call by `item_reference`).
// Usage: node ai_sdk.mjs BASE_URL KEY MODEL; prints what it saw as JSON.
import { generateText, jsonSchema, stepCountIs, tool } from "ai";
import { createOpenAI } from "@ai-sdk/openai";

const [baseURL, apiKey, model] = process.argv.slice(2);
const openai = createOpenAI({ baseURL, apiKey });
const calls = [];
const result = await generateText({
  model: openai(model),
  prompt: "Use the weather tool for Paris, then say what it found.",
  tools: {
    weather: tool({
      description: "The weather in a city",
      inputSchema: jsonSchema({
        type: "object",
        properties: { city: { type: "string" } },
        required: ["city"],
        additionalProperties: false,
      }),
      execute: async ({ city }) => {
        calls.push(city);
        return `sunny in ${city}`;
      },
    }),
  },
  stopWhen: stepCountIs(2),
});
console.log(
  JSON.stringify({
    steps: result.steps.length,
    calls,
    text: result.text,
    finishReason: result.finishReason,
  }),
);
