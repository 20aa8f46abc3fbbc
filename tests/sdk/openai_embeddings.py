"""The official openai SDK against the gateway's embeddings door.

Usage: openai_embeddings.py BASE_URL KEY POOR_KEY
Prints a JSON object of what it saw, for the Rust test to assert on.
"""
import json
import sys

import openai
from openai import OpenAI

base_url, key, poor_key = sys.argv[1:4]
client = OpenAI(base_url=base_url, api_key=key, max_retries=0)

raw = client.embeddings.with_raw_response.create(model="embed", input=["first text", "second text"])
created = raw.parse()
seen = {
    "vectors": len(created.data),
    "dimensions": len(created.data[0].embedding),
    "prompt_tokens": created.usage.prompt_tokens,
    "cost": raw.headers.get("x-tollgate-cost"),
}

poor = OpenAI(base_url=base_url, api_key=poor_key, max_retries=0)
try:
    poor.embeddings.create(model="embed", input="a text the budget cannot hold")
    seen["poor"] = "none"
except openai.APIStatusError as error:
    seen["poor"] = [error.status_code, error.body.get("code") if isinstance(error.body, dict) else None]

print(json.dumps(seen))
