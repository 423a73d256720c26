#!/usr/bin/env python3
"""Reference renderings of a chat template with python3-jinja2, set up as Hugging Face's
apply_chat_template sets it up: a sandboxed environment with trim_blocks and lstrip_blocks, its
tojson filter and raise_exception function, the special tokens of tokenizer_config.json, and
tools/documents passed as None unless a case gives them.

    render_chat_template.py TOKENIZER_CONFIG.json CASES.json [OVERRIDES.json] > renders.json

CASES.json: [{"messages": [...], "add_generation_prompt": bool, "extra": {...}}, ...].
OVERRIDES.json (optional): special-token variables that replace the config's.
Prints a JSON list with one rendered string per case (or {"error": "..."} where rendering raised).
"""
import json
import sys

from jinja2.exceptions import TemplateError
from jinja2.sandbox import ImmutableSandboxedEnvironment


def raise_exception(message):
    raise TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def token_text(v):
    if isinstance(v, str):
        return v
    if isinstance(v, dict) and isinstance(v.get("content"), str):
        return v["content"]
    return None


def main():
    config = json.load(open(sys.argv[1], encoding="utf-8"))
    cases = json.load(open(sys.argv[2], encoding="utf-8"))
    variables = {}
    for key in ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"):
        t = token_text(config.get(key))
        if t is not None:
            variables[key] = t
    if isinstance(config.get("additional_special_tokens"), list):
        variables["additional_special_tokens"] = [token_text(t) for t in config["additional_special_tokens"]
                                                  if token_text(t) is not None]
    if len(sys.argv) > 3:
        variables.update(json.load(open(sys.argv[3], encoding="utf-8")))

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    template = env.from_string(config["chat_template"])
    out = []
    for case in cases:
        kwargs = dict(variables)
        kwargs.update(messages=case["messages"], tools=None, documents=None,
                      add_generation_prompt=case["add_generation_prompt"])
        kwargs.update(case.get("extra", {}))
        try:
            out.append(template.render(**kwargs))
        except TemplateError as e:
            out.append({"error": str(e)})
    json.dump(out, sys.stdout, ensure_ascii=False)


if __name__ == "__main__":
    main()
