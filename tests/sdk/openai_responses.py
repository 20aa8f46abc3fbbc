"""The official openai SDK against the gateway's Responses door.

Usage: openai_responses.py BASE_URL KEY POOR_KEY
Prints a JSON object of what it saw, for the Rust test to assert on.
"""
import json
import sys

import openai
from openai import OpenAI

base_url, key, poor_key = sys.argv[1:4]
client = OpenAI(base_url=base_url, api_key=key, max_retries=0)
seen = {}

plain = client.responses.create(model="quick", instructions="Be brief.", input="Hello!")
seen["plain"] = {"text": plain.output_text, "status": plain.status,
                 "input_tokens": plain.usage.input_tokens, "output_tokens": plain.usage.output_tokens,
                 "cached": plain.usage.input_tokens_details.cached_tokens}

tools = [{"type": "function", "name": "lookup", "description": "Looks a word up.",
          "parameters": {"type": "object", "properties": {"word": {"type": "string"}}}}]
with_tool = client.responses.create(
    model="quick",
    tools=tools,
    input=[
        {"role": "user", "content": [{"type": "input_text", "text": "What is a tollgate?"}]},
        {"type": "function_call", "call_id": "call_1", "name": "lookup", "arguments": "{\"word\": \"tollgate\"}"},
        {"type": "function_call_output", "call_id": "call_1", "output": "a gate where a toll is paid"},
    ],
)
seen["tool"] = {"text": with_tool.output_text, "tools": [t.name for t in with_tool.tools]}

deltas = []
completed = None
with client.responses.stream(model="quick", input="Tell me a story") as stream:
    for event in stream:
        if event.type == "response.output_text.delta":
            deltas.append(event.delta)
        elif event.type == "response.completed":
            completed = event.response
final = stream.get_final_response()
seen["stream"] = {"text": "".join(deltas), "final_text": final.output_text,
                  "input_tokens": completed.usage.input_tokens,
                  "output_tokens": completed.usage.output_tokens}

# The route "direct" is served by a provider that speaks the Responses API:
# its own objects and events come back, passed through.
direct = client.responses.create(model="direct", input="Hello!", reasoning={"effort": "low"})
direct_deltas = []
with client.responses.stream(model="direct", input="Tell me a story") as stream:
    for event in stream:
        if event.type == "response.output_text.delta":
            direct_deltas.append(event.delta)
direct_final = stream.get_final_response()
seen["direct"] = {"id": direct.id, "text": direct.output_text, "effort": direct.reasoning.effort,
                  "input_tokens": direct.usage.input_tokens,
                  "cached": direct.usage.input_tokens_details.cached_tokens,
                  "stream_id": direct_final.id, "stream_text": "".join(direct_deltas),
                  "final_text": direct_final.output_text,
                  "output_tokens": direct_final.usage.output_tokens}

# Its runaway stream, ended by the gateway at the hold: the SDK takes the ending too.
cut_kinds = []
with client.responses.stream(model="direct_runaway", input="go on", max_output_tokens=10) as stream:
    for event in stream:
        cut_kinds.append(event.type)
        if event.type == "response.incomplete":
            seen["direct_cut_reason"] = event.response.incomplete_details.reason
seen["direct_cut"] = cut_kinds[-4:]

poor = OpenAI(base_url=base_url, api_key=poor_key, max_retries=0)
try:
    poor.responses.create(model="quick", input="Hello!", max_output_tokens=100000)
    seen["poor"] = "none"
except openai.APIStatusError as error:
    seen["poor"] = [error.status_code, error.body.get("code") if isinstance(error.body, dict) else None]

try:
    client.responses.create(model="quick", input="Hello!", previous_response_id="resp_123")
    seen["stateful"] = "none"
except openai.BadRequestError as error:
    seen["stateful"] = error.body.get("param") if isinstance(error.body, dict) else None

print(json.dumps(seen))
