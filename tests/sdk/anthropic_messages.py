"""The official anthropic SDK against the gateway's Messages door.

Usage: anthropic_messages.py BASE_URL KEY
Prints a JSON object of what it saw, for the Rust test to assert on.
"""
import json
import sys

from anthropic import Anthropic

base_url, key = sys.argv[1:3]
# The SDK sends the key as x-api-key, with anthropic-version.
client = Anthropic(base_url=base_url, api_key=key, max_retries=0)
seen = {}

created = client.messages.create(
    model="claude",
    max_tokens=300,
    system=[{"type": "text", "text": "Reference tables.", "cache_control": {"type": "ephemeral"}}],
    messages=[{"role": "user", "content": "Hello!"}],
)
seen["create"] = {"type": created.type, "text": created.content[0].text,
                  "input_tokens": created.usage.input_tokens,
                  "output_tokens": created.usage.output_tokens}

tools = [{"name": "lookup", "description": "Looks a word up.",
          "input_schema": {"type": "object", "properties": {"word": {"type": "string"}}}}]
question = {"role": "user", "content": "What is a tollgate?"}
tool = client.messages.create(model="gpt-tool", max_tokens=200, tools=tools, messages=[question])
tool_use = next(block for block in tool.content if block.type == "tool_use")
seen["tool"] = {"stop_reason": tool.stop_reason, "name": tool_use.name, "input": tool_use.input}

answered = client.messages.create(
    model="claude-tool",
    max_tokens=200,
    tools=tools,
    messages=[
        question,
        {"role": "assistant", "content": [
            {"type": "tool_use", "id": tool_use.id, "name": tool_use.name, "input": tool_use.input}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": tool_use.id, "content": "a gate where a toll is paid"}]},
    ],
)
seen["tool_result"] = {"type": answered.type, "stop_reason": answered.stop_reason}

deltas = []
with client.messages.stream(model="gpt", max_tokens=64,
                            messages=[{"role": "user", "content": "Tell me a story"}]) as stream:
    for text in stream.text_stream:
        deltas.append(text)
    final = stream.get_final_message()
seen["stream"] = {"text": "".join(deltas),
                  "final_text": "".join(b.text for b in final.content if b.type == "text"),
                  "usage": {"input_tokens": final.usage.input_tokens,
                            "cache_read_input_tokens": final.usage.cache_read_input_tokens or 0,
                            "output_tokens": final.usage.output_tokens}}

counted = client.messages.count_tokens(model="claude", messages=[{"role": "user", "content": "Hello!"}])
seen["count"] = counted.input_tokens

print(json.dumps(seen))
