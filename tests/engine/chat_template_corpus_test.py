"""baton's chat-template rendering against Python's jinja2 under transformers' settings.

Every template in llama.cpp's corpus of real chat templates (models/templates of the
llama-cpp-python source distribution, extracted by scripts/fetch_deps.sh into
third_party/llama-jinja/templates) and the built-in ones are rendered over a set of conversations
(plain turns, tools, tool calls and their results, reasoning, content parts, many scripts and
emoji) by `baton chat-template` and by jinja2 set up as transformers' apply_chat_template sets it
up. A case agrees when both renderings are byte-equal or both fail. Templates known to disagree
are listed in KNOWN_DIFFERENCES with the reason; the list must stay exact (a listed template that
agrees fails the test too).

The templates of the GGUF files in --models (those that have one) are compared the same way.

usage: chat_template_corpus_test.py --baton PATH --templates DIR [--models DIR] [--show NAME]
"""
import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import jinja2
import jinja2.ext
import jinja2.nodes
from jinja2.sandbox import ImmutableSandboxedEnvironment

NOW = 1721995200  # 2024-07-26 12:00:00 UTC, the time strftime_now formats on both sides
BOS, EOS = "<s>", "</s>"

# Where baton's rendering and jinja2's both succeed and differ: (template, case) -> why.
KNOWN_DIFFERENCES = {
    # jinja2's "text"|safe + str escapes the str as HTML (Markup's concatenation); llama.cpp's
    # engine has no Markup strings.
    ("meetkai-functionary-medium-v3.1", "tools"): "Markup escaping",
    ("meetkai-functionary-medium-v3.1", "tool_round"): "Markup escaping",
    ("meetkai-functionary-medium-v3.1", "parallel_tool_calls"): "Markup escaping",
    # {{ message.content }} of a list of parts prints Python's repr of the list in jinja2 and
    # nothing in llama.cpp's engine (baton's HTTP API gives templates text, never parts).
    ("CohereForAI-c4ai-command-r7b-12-2024-tool_use", "content_parts"): "printing a list",
}

# Errors jinja2 raises where llama.cpp's engine renders on: it treats an undefined value as
# empty, converts what it concatenates to text, lets a template append to its own lists and
# writes generators as lists. baton renders these conversations; transformers refuses them.
LENIENT_ERRORS = (
    "can only concatenate",          # "a" + list (content given as parts), "a" + dict
    "has no attribute",              # message.content.x where content is absent (null)
    "is undefined",                  # a variable the template assumes, e.g. firefunction's
    "of 'list' object is unsafe",    # list.append in jinja2's immutable sandbox
    "is not JSON serializable",      # tojson of a generator
)

TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "Current weather in a city.",
        "parameters": {"type": "object",
                       "properties": {"city": {"type": "string", "description": "City name"},
                                      "unit": {"type": "string", "enum": ["c", "f"]}},
                       "required": ["city"]}}},
    {"type": "function", "function": {
        "name": "get_time", "description": "Local time in a timezone.",
        "parameters": {"type": "object",
                       "properties": {"tz": {"type": "string"}}, "required": ["tz"]}}},
]


def call(call_id, name, arguments):
    return {"id": call_id, "type": "function",
            "function": {"name": name, "arguments": arguments}}


CASES = {
    "user": {"messages": [{"role": "user", "content": "Hello!"}]},
    "multi_turn": {"messages": [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "What is 2+2?"},
        {"role": "assistant", "content": "4"},
        {"role": "user", "content": "  And 3+3?\n"}]},
    "no_generation_prompt": {"add_generation_prompt": False, "messages": [
        {"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello."}]},
    "tools": {"tools": TOOLS, "messages": [
        {"role": "system", "content": "You can call tools."},
        {"role": "user", "content": "Weather in Paris?"}]},
    "tool_round": {"tools": TOOLS, "messages": [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": None,
         "tool_calls": [call("abc123XYZ", "get_weather", {"city": "Paris", "unit": "c"})]},
        {"role": "tool", "tool_call_id": "abc123XYZ", "name": "get_weather",
         "content": "{\"temperature\": 21}"}]},
    "parallel_tool_calls": {"tools": TOOLS, "messages": [
        {"role": "user", "content": "Weather in Paris and time in Tokyo?"},
        {"role": "assistant", "content": "",
         "tool_calls": [call("abc123XYZ", "get_weather", {"city": "Paris"}),
                        call("def456UVW", "get_time", {"tz": "Asia/Tokyo"})]},
        {"role": "tool", "tool_call_id": "abc123XYZ", "name": "get_weather", "content": "21 C"},
        {"role": "tool", "tool_call_id": "def456UVW", "name": "get_time", "content": "09:00"},
        {"role": "assistant", "content": "21 C in Paris; 09:00 in Tokyo."},
        {"role": "user", "content": "Thanks"}]},
    # Unicode spaces at the edges (U+3000, U+00A0, \x1c): Python's strip() takes them off.
    "many_scripts": {"messages": [
        {"role": "system", "content": "\u3000 Answer in kind.\u00a0"},
        {"role": "user", "content": "Grüße, 你好, こんにちは, مرحبا, Привет 👋🏽 —\t tabs  and\n\n"
                                    "newlines   {{ not a tag }} {% raw %} <|im_end|> \x1c"}]},
    "reasoning": {"chat_template_kwargs": {"enable_thinking": False}, "messages": [
        {"role": "user", "content": "Is 7 prime?"},
        {"role": "assistant", "content": "Yes.", "reasoning_content": "7 has no divisors."},
        {"role": "user", "content": "And 9?"}]},
    "content_parts": {"messages": [
        {"role": "system", "content": [{"type": "text", "text": "Be brief."}]},
        {"role": "user", "content": [{"type": "text", "text": "Name a colour."}]}]},
}


class GenerationTag(jinja2.ext.Extension):
    """transformers' {% generation %} ... {% endgeneration %}: renders its body."""
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

    def _body(self, caller):
        return caller()


def transformers_environment():
    """jinja2 as transformers' _compile_jinja_template sets it up."""
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    def strftime_now(fmt):
        return datetime.datetime.fromtimestamp(NOW).strftime(fmt)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[GenerationTag, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    env.globals["dict"] = dict
    env.globals["namespace"] = jinja2.utils.Namespace
    return env


def as_transformers_passes(message):
    """None-valued keys dropped; reasoning also under "thinking" and "reasoning_content"."""
    message = {k: v for k, v in message.items() if v is not None}
    for field in ("reasoning_content", "thinking", "reasoning"):
        if message.get(field) is not None:
            reasoning = message[field]
            return {"thinking": reasoning, **message, "reasoning_content": reasoning}
    return message


def render_reference(env, source, case):
    try:
        template = env.from_string(source)
        return {"text": template.render(
            messages=[as_transformers_passes(m) for m in case["messages"]],
            tools=case.get("tools"), documents=None,
            add_generation_prompt=case.get("add_generation_prompt", True),
            bos_token=BOS, eos_token=EOS, **case.get("chat_template_kwargs", {}))}
    except Exception as e:  # a template's own error, or one of jinja2's
        return {"error": f"{type(e).__name__}: {e}"}


def render_baton(baton, template, cases):
    lines = "".join(json.dumps(case) + "\n" for case in cases)
    out = subprocess.run(
        [baton, "chat-template", "--template", str(template), "--bos", BOS, "--eos", EOS,
         "--now", str(NOW), "--jsonl"],
        input=lines, capture_output=True, text=True, timeout=120,
        env={**os.environ, "TZ": "UTC"})
    if out.returncode != 0:
        return [{"error": f"baton exited {out.returncode}: {out.stderr.strip()}"}] * len(cases)
    rendered = [json.loads(line) for line in out.stdout.splitlines()]
    if len(rendered) != len(cases):
        return [{"error": f"baton answered {len(rendered)} of {len(cases)} requests"}] * len(cases)
    return rendered


def agrees(ours, reference):
    return kind(ours, reference) == "equal"


def kind(ours, reference):
    """equal, differs (both render, texts differ), lenient (jinja2 refuses the conversation and
    baton renders it) or strict (baton refuses what jinja2 renders)."""
    if "error" in reference and "error" in ours:
        return "equal"
    if "error" in reference:
        return "lenient"
    if "error" in ours:
        return "strict"
    return "equal" if ours["text"] == reference["text"] else "differs"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--baton", required=True)
    parser.add_argument("--templates", required=True, type=Path)
    parser.add_argument("--models", type=Path, help="also the templates of these GGUF files")
    parser.add_argument("--show", help="print both renderings of this template's failing cases")
    args = parser.parse_args()
    os.environ["TZ"] = "UTC"
    env = transformers_environment()
    templates = sorted(args.templates.glob("*.jinja"))
    if not templates:
        sys.exit(f"no templates in {args.templates}: run scripts/fetch_deps.sh")
    model_templates = tempfile.TemporaryDirectory()
    for model in sorted(args.models.glob("*.gguf")) if args.models else []:
        source = subprocess.run([args.baton, "chat-template", "--model", str(model),
                                 "--print-source"], capture_output=True, text=True)
        if source.returncode == 0:
            path = Path(model_templates.name) / f"{model.stem}.jinja"
            path.write_text(source.stdout, encoding="utf-8")
            templates.append(path)
            print(f"{model.name}: its own template is compared too")
    names = list(CASES)
    cases = [CASES[n] for n in names]
    failures, agreeing_templates, case_counts = {}, 0, [0, 0]
    errors = {}  # (template, case) -> jinja2's error, "" when it rendered
    both_fail = 0
    for template in templates:
        source = template.read_text(encoding="utf-8")
        reference = [render_reference(env, source, c) for c in cases]
        ours = render_baton(args.baton, template, cases)
        bad = [f"{n}:{kind(o, r)}" for n, o, r in zip(names, ours, reference) if not agrees(o, r)]
        errors.update({(template.stem, n): r.get("error", "") for n, r in zip(names, reference)})
        both_fail += sum("error" in r and "error" in o for o, r in zip(ours, reference))
        case_counts[0] += len(cases) - len(bad)
        case_counts[1] += len(cases)
        if bad:
            failures[template.stem] = bad
        else:
            agreeing_templates += 1
        if args.show == template.stem:
            for n, o, r in zip(names, ours, reference):
                if not agrees(o, r):
                    print(f"--- {n}\nbaton:  {o!r}\njinja2: {r!r}")
    print(f"chat templates byte-equal to jinja2 on every case: {agreeing_templates} of "
          f"{len(templates)}; cases {case_counts[0]} of {case_counts[1]} "
          f"({both_fail} where both refuse the conversation)")
    rendered = [k for k, e in errors.items() if not e]
    rendered_equal = sum(1 for k in rendered
                         if f"{k[1]}:differs" not in failures.get(k[0], [])
                         and f"{k[1]}:strict" not in failures.get(k[0], []))
    print(f"where jinja2 renders the conversation: {rendered_equal} of {len(rendered)} byte-equal")
    problems = []
    observed_differences = set()
    lenient = 0
    for name, bad in failures.items():
        print(f"  {name}: {', '.join(bad)}")
        for entry in bad:
            case, how = entry.rsplit(":", 1)
            error = errors[(name, case)]
            if how == "differs" and (name, case) in KNOWN_DIFFERENCES:
                observed_differences.add((name, case))
            elif how == "lenient" and any(e in error for e in LENIENT_ERRORS):
                lenient += 1
            else:
                problems.append(f"{name} {case}: {how} {error}")
    print(f"baton renders where jinja2 raises one of the known errors: {lenient} cases")
    for key in sorted(set(KNOWN_DIFFERENCES) - observed_differences):
        problems.append(f"{key} is listed as a known difference but agrees now")
    for p in problems:
        print(f"FAIL: {p}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
