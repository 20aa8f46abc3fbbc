"""The OpenAI Agents SDK as an app uses it: an agent with a function tool
and a structured `output_type`, run to its end over the Responses API.
Usage: python3 agents_sdk.py BASE_URL KEY MODEL; prints what it saw as JSON."""

import json
import sys

from openai import AsyncOpenAI
from pydantic import BaseModel

from agents import Agent, Runner, function_tool, set_default_openai_client, set_tracing_disabled

base_url, key, model = sys.argv[1:4]
set_tracing_disabled(True)
set_default_openai_client(AsyncOpenAI(base_url=base_url, api_key=key), use_for_tracing=False)

calls = []


@function_tool
def weather(city: str) -> str:
    """The weather in a city."""
    calls.append(city)
    return f"sunny in {city}"


class Report(BaseModel):
    city: str
    summary: str


agent = Agent(
    name="forecaster",
    instructions="Use the weather tool, then report.",
    model=model,
    tools=[weather],
    output_type=Report,
)
result = Runner.run_sync(agent, "What is the weather in Paris?")
print(json.dumps({"calls": calls, "output": result.final_output.model_dump(), "turns": len(result.raw_responses)}))
