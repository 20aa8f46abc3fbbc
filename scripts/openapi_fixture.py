#!/usr/bin/env python3
"""Writes tests/fixtures/openai-openapi.json: the schemas of OpenAI's published
OpenAPI description (the `openai/openai-openapi` repository's openapi.json)
that the OpenAI doors' answers must satisfy, with every schema they reach.
Usage: scripts/openapi_fixture.py PATH/TO/openapi.json SOURCE-COMMIT"""

import json
import sys

ROOTS = [
    "CreateChatCompletionResponse",
    "CreateChatCompletionStreamResponse",
    "Response",
    "ResponseStreamEvent",
    "CreateEmbeddingResponse",
    "ErrorResponse",
]


def refs(node):
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "$ref" and isinstance(value, str) and value.startswith("#/components/schemas/"):
                yield value.rsplit("/", 1)[1]
            else:
                yield from refs(value)
    elif isinstance(node, list):
        for value in node:
            yield from refs(value)


def main(path, commit):
    schemas = json.load(open(path))["components"]["schemas"]
    kept, todo = {}, list(ROOTS)
    while todo:
        name = todo.pop()
        if name not in kept:
            kept[name] = schemas[name]
            todo.extend(refs(schemas[name]))
    fixture = {
        "info": {"source": f"openai/openai-openapi openapi.json at {commit}", "roots": ROOTS},
        "components": {"schemas": dict(sorted(kept.items()))},
    }
    with open("tests/fixtures/openai-openapi.json", "w") as out:
        json.dump(fixture, out, indent=1, sort_keys=False)
        out.write("\n")


if __name__ == "__main__":
    main(*sys.argv[1:3])
