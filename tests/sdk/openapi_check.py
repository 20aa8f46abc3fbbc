"""Validates answers of the OpenAI doors against OpenAI's published OpenAPI
description (tests/fixtures/openai-openapi.json). Reads a JSON array of
{"what": label, "schema": name, "value": object} from the file named by its
argument; prints a JSON array of the failures (empty: all valid)."""

import json
import sys
from pathlib import Path

from jsonschema import Draft202012Validator
from jsonschema.exceptions import best_match
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "openai-openapi.json"
URI = "urn:openai-openapi"


def nullable(node):
    """OpenAPI 3.0's `nullable: true`, which the description still uses in
    places, as JSON Schema's own way of saying it."""
    if isinstance(node, dict):
        node = {key: nullable(value) for key, value in node.items()}
        if node.pop("nullable", False) is True:
            return {"anyOf": [node, {"type": "null"}]}
        return node
    if isinstance(node, list):
        return [nullable(value) for value in node]
    return node


def validators():
    document = nullable(json.loads(FIXTURE.read_text()))
    registry = Registry().with_resource(URI, Resource(contents=document, specification=DRAFT202012))
    cache = {}

    def validator(name):
        if name not in cache:
            schema = {"$ref": f"{URI}#/components/schemas/{name}"}
            cache[name] = Draft202012Validator(schema, registry=registry)
        return cache[name]

    return validator


def deepest(error):
    """Past a union (`anyOf`, `oneOf`), the error of the branch the value's
    `type` names: what is wrong with an event, not that it fits no event."""
    while error.context:
        branches = {}
        for sub in error.context:
            branches.setdefault(sub.relative_schema_path[0], []).append(sub)
        # A branch whose `type` refuses the value's is another kind of item.
        fitting = [
            subs for subs in branches.values()
            if not any(list(sub.relative_path) == ["type"] for sub in subs)
        ]
        chosen = min(fitting or list(branches.values()), key=len)
        error = best_match(chosen)
    return error


def main(path):
    validator = validators()
    failures = []
    for answer in json.loads(Path(path).read_text()):
        errors = sorted(validator(answer["schema"]).iter_errors(answer["value"]), key=lambda e: e.path)
        for error in map(deepest, errors[:3]):
            failures.append({
                "what": answer["what"],
                "schema": answer["schema"],
                "at": "/".join(str(p) for p in error.absolute_path),
                "error": error.message[:300],
            })
    print(json.dumps(failures))


if __name__ == "__main__":
    main(sys.argv[1])
