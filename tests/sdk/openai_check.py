"""The official OpenAI Python SDK against a running Tollgate.

Usage: openai_check.py BASE_URL KEY RATE_LIMITED_KEY
Prints one JSON object with what the SDK saw; the Rust test asserts on it.
"""
import json
import sys

import openai
from openai import OpenAI


def main() -> None:
    base_url, key, limited_key = sys.argv[1], sys.argv[2], sys.argv[3]
    client = OpenAI(base_url=base_url, api_key=key, max_retries=0)
    seen = {}

    stream = client.chat.completions.create(
        model="quick",
        messages=[{"role": "user", "content": "Tell me a story"}],
        stream=True,
    )
    parts = []
    for chunk in stream:
        for choice in chunk.choices:
            if choice.delta and choice.delta.content:
                parts.append(choice.delta.content)
    seen["streamed"] = "".join(parts)

    raw = client.chat.completions.with_raw_response.create(
        model="quick", messages=[{"role": "user", "content": "Hello"}]
    )
    completion = raw.parse()
    seen["content"] = completion.choices[0].message.content
    seen["cost"] = raw.headers.get("x-tollgate-cost")

    limited = OpenAI(base_url=base_url, api_key=limited_key, max_retries=0)
    errors = []
    for _ in range(2):
        try:
            limited.chat.completions.create(
                model="quick", messages=[{"role": "user", "content": "Hello"}]
            )
            errors.append("none")
        except openai.RateLimitError:
            errors.append("RateLimitError")
        except openai.APIError as error:
            errors.append(type(error).__name__)
    seen["limited"] = errors

    try:
        client.chat.completions.create(model="nope", messages=[{"role": "user", "content": "x"}])
        seen["unknown_model"] = "none"
    except openai.NotFoundError:
        seen["unknown_model"] = "NotFoundError"

    print(json.dumps(seen))


if __name__ == "__main__":
    main()
