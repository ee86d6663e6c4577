"""A chat template the operator names (`--chat-template FILE`) served by a `baton up` cluster,
prefill and decode in separate processes, driven by the official `openai` client; with it, tool
calling (the template's <tool_call> format read back as the "hermes" parser reads it).

The template is Qwen2.5-7B-Instruct's (llama.cpp's corpus, third_party/llama-jinja/templates),
which renders tools, assistant tool calls and tool results in ChatML, the default model's
format; two lines are put before it: one raises for a message "RAISE", one writes
chat_template_kwargs' enable_thinking. Each chat's prompt must be what `baton chat-template`
renders for the same request, tokenized as `baton tokenize --parse-special` does; a template
error is a 400 naming it, and the cluster serves on.
"""

import json
import pathlib
import subprocess
import tempfile

import openai
import pytest

from baton_cluster import BINARY, ROOT, running_cluster

MODEL = ROOT / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"
QWEN_TEMPLATE = ROOT / "third_party" / "llama-jinja" / "templates" / "Qwen-Qwen2.5-7B-Instruct.jinja"
PREFIX = (
    "{%- if messages[-1]['content'] == 'RAISE' %}"
    "{{ raise_exception('this template refuses RAISE') }}{% endif %}"
    "{%- if enable_thinking is defined %}[thinking={{ enable_thinking }}]{% endif %}"
)

TOOL_CHAT = [
    {"role": "user", "content": "Weather in Paris?"},
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function",
         "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\", \"unit\": \"c\"}"}}]},
    {"role": "tool", "tool_call_id": "call_1", "name": "get_weather", "content": "21 C"},
]


@pytest.fixture(scope="module")
def template_file():
    with tempfile.TemporaryDirectory() as tmp:
        path = pathlib.Path(tmp) / "qwen-with-checks.jinja"
        path.write_text(PREFIX + QWEN_TEMPLATE.read_text(encoding="utf-8"), encoding="utf-8")
        yield path


# On a cluster whose decode worker decodes plainly and on one that speculates (n-gram prompt
# lookup, which the few-shot tool calls feed well): the same answers.
@pytest.fixture(scope="module", params=["", '    args: ["--speculative", "ngram"]\n'],
                ids=["plain", "ngram"])
def client(template_file, request):
    assert MODEL.exists(), f"{MODEL} is missing: run scripts/fetch_model.sh"
    assert QWEN_TEMPLATE.exists(), f"{QWEN_TEMPLATE} is missing: run scripts/fetch_deps.sh"
    cluster_yaml = f"""\
host: 127.0.0.1
model: {MODEL}
router:
  port: 0
  http_port: 0
  args: ["--chat-template", "{template_file}"]
prefill:
  - threads: 1
decode:
  - threads: 1
    kv_cache_memory: 64M
""" + request.param
    with running_cluster(cluster_yaml) as url:
        yield openai.OpenAI(base_url=url, api_key="unused", max_retries=0, timeout=120)


def rendered_prompt_tokens(template_file, request):
    """The token count of `baton chat-template`'s rendering of `request` (what the server must
    have encoded: SmolLM2 adds no BOS)."""
    text = subprocess.run(
        [BINARY, "chat-template", "--model", str(MODEL), "--template", str(template_file)],
        input=json.dumps(request), capture_output=True, text=True, check=True).stdout
    ids = subprocess.run(
        [BINARY, "tokenize", "--model", str(MODEL), "--parse-special"],
        input=text, capture_output=True, text=True, check=True).stdout.split()
    return text, len(ids)


def test_tool_conversation_renders_as_baton_chat_template_does(client, template_file):
    for kwargs in ({}, {"enable_thinking": False}):
        extra = {"chat_template_kwargs": kwargs} if kwargs else None
        reply = client.chat.completions.create(
            model="SmolLM2-135M-Instruct.Q4_1", messages=TOOL_CHAT, max_tokens=8, temperature=0,
            extra_body=extra)
        request = {"messages": TOOL_CHAT, **({"chat_template_kwargs": kwargs} if kwargs else {})}
        text, n_tokens = rendered_prompt_tokens(template_file, request)
        assert ("[thinking=False]" in text) == bool(kwargs)
        assert '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "unit": "c"}}' \
            in text, text
        assert "<tool_response>\n21 C\n</tool_response>" in text, text
        assert reply.usage.prompt_tokens == n_tokens
        # The same prompt sent as text: the same greedy continuation.
        raw = client.completions.create(
            model="SmolLM2-135M-Instruct.Q4_1", prompt=text, max_tokens=8, temperature=0)
        assert raw.usage.prompt_tokens == n_tokens
        assert raw.choices[0].text == reply.choices[0].message.content


def test_a_template_error_is_a_400_naming_it_and_the_cluster_serves_on(client):
    with pytest.raises(openai.BadRequestError) as error:
        client.chat.completions.create(
            model="SmolLM2-135M-Instruct.Q4_1", max_tokens=4,
            messages=[{"role": "user", "content": "RAISE"}])
    assert "this template refuses RAISE" in str(error.value)
    reply = client.chat.completions.create(
        model="SmolLM2-135M-Instruct.Q4_1", max_tokens=4, temperature=0,
        messages=[{"role": "user", "content": "Hello"}])
    assert reply.choices[0].message.content


def test_bad_tool_messages_are_400s_naming_the_field(client):
    for messages, param in (
        ([{"role": "assistant", "tool_calls": [{"type": "function", "function": {"arguments": "{}"}}]}],
         "messages[0].tool_calls[0]"),
        ([{"role": "user", "content": "x"}, {"role": "tool", "content": "y", "tool_call_id": 3}],
         "messages[1].tool_call_id"),
    ):
        with pytest.raises(openai.BadRequestError) as error:
            client.chat.completions.create(
                model="SmolLM2-135M-Instruct.Q4_1", max_tokens=4, messages=messages)
        assert error.value.body["param"] == param


def test_tokenize_gives_the_ids_a_chat_is_prefilled_with(client, template_file):
    import httpx2 as httpx
    base = str(client.base_url).removesuffix("/v1/")
    tokenized = httpx.post(f"{base}/tokenize", json={"messages": TOOL_CHAT}).json()
    text, n_tokens = rendered_prompt_tokens(template_file, {"messages": TOOL_CHAT})
    assert tokenized["count"] == len(tokenized["tokens"]) == n_tokens
    assert tokenized["max_model_len"] == 8192
    back = httpx.post(f"{base}/detokenize", json={"tokens": tokenized["tokens"]}).json()
    assert back["prompt"] == text
    no_prompt = httpx.post(f"{base}/tokenize", json={"messages": TOOL_CHAT,
                                                     "add_generation_prompt": False}).json()
    assert no_prompt["count"] < n_tokens
    plain = httpx.post(f"{base}/tokenize", json={"prompt": "Hello world"}).json()
    assert plain["tokens"] == [19556, 905]
    bad = httpx.post(f"{base}/detokenize", json={"tokens": [1, 10 ** 9]})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "tokens"
    bad = httpx.post(f"{base}/tokenize", json={"messages": [{"role": "user", "content": "RAISE"}]})
    assert bad.status_code == 400 and "this template refuses RAISE" in bad.json()["error"]["message"]


WEATHER_TOOL = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]}}}


def few_shot_weather(city):
    """Three earlier turns in which the assistant called get_weather: the default model (135M,
    not trained for tools) then writes the call for `city` itself, greedily."""
    messages = []
    for i, earlier in enumerate(["Paris", "Berlin", "Tokyo"]):
        messages += [
            {"role": "user", "content": f"Weather in {earlier}?"},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": f"call_{i}", "type": "function", "function": {
                    "name": "get_weather", "arguments": json.dumps({"city": earlier})}}]},
            {"role": "tool", "tool_call_id": f"call_{i}", "content": "20 C"},
            {"role": "assistant", "content": f"It is 20 C in {earlier}."}]
    return messages + [{"role": "user", "content": f"Weather in {city}?"}]


def test_the_model_calls_a_tool_and_the_call_comes_back_parsed(client):
    kwargs = dict(model="SmolLM2-135M-Instruct.Q4_1", tools=[WEATHER_TOOL], max_tokens=60,
                  temperature=0)
    for city in ("Rome", "Madrid"):
        reply = client.chat.completions.create(messages=few_shot_weather(city), **kwargs)
        choice = reply.choices[0]
        assert choice.finish_reason == "tool_calls"
        assert choice.message.content is None
        (call,) = choice.message.tool_calls
        assert call.type == "function" and call.id.startswith("call_")
        assert call.function.name == "get_weather"
        assert json.loads(call.function.arguments) == {"city": city}

        # Streamed: the same call, whole, in one tool_calls delta; no text of it as content.
        chunks = list(client.chat.completions.create(
            messages=few_shot_weather(city), stream=True, **kwargs))
        calls = [c for chunk in chunks for c in (chunk.choices[0].delta.tool_calls or [])]
        assert [(c.index, c.function.name, c.function.arguments) for c in calls] == \
            [(0, "get_weather", call.function.arguments)]
        assert "".join(chunk.choices[0].delta.content or "" for chunk in chunks) == ""
        assert chunks[-1].choices[0].finish_reason == "tool_calls"

    # The call and its result go back into the conversation; the model answers in text.
    messages = few_shot_weather("Rome") + [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_9", "type": "function", "function": {
                "name": "get_weather", "arguments": call.function.arguments}}]},
        {"role": "tool", "tool_call_id": "call_9", "content": "25 C"}]
    answer = client.chat.completions.create(messages=messages, **kwargs).choices[0]
    assert answer.finish_reason == "stop" and not answer.message.tool_calls
    assert "25" in answer.message.content

    # tool_choice "none": the tools are still shown, the output is text.
    plain = client.chat.completions.create(
        messages=few_shot_weather("Rome"), tool_choice="none", **kwargs).choices[0]
    assert plain.finish_reason == "stop" and not plain.message.tool_calls
    assert plain.message.content.startswith("<tool_call>")


def test_langchain_bind_tools_gets_the_call(client):
    from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
    from langchain_openai import ChatOpenAI

    def get_weather(city: str) -> str:
        """The weather in a city."""
        return "20 C"

    history = []
    for message in few_shot_weather("Rome"):
        if message["role"] == "user":
            history.append(HumanMessage(message["content"]))
        elif message["role"] == "tool":
            history.append(ToolMessage(message["content"], tool_call_id=message["tool_call_id"]))
        elif message.get("tool_calls"):
            call = message["tool_calls"][0]
            history.append(AIMessage("", tool_calls=[{
                "id": call["id"], "name": call["function"]["name"],
                "args": json.loads(call["function"]["arguments"])}]))
        else:
            history.append(AIMessage(message["content"]))
    chat = ChatOpenAI(base_url=str(client.base_url), api_key="unused",
                      model="SmolLM2-135M-Instruct.Q4_1", temperature=0, max_tokens=60,
                      max_retries=0)
    reply = chat.bind_tools([get_weather]).invoke(history)
    assert [(c["name"], c["args"]) for c in reply.tool_calls] == [("get_weather", {"city": "Rome"})]
    assert reply.response_metadata["finish_reason"] == "tool_calls"


def test_a_required_or_named_tool_choice_always_gets_a_call(client):
    # The few-shot history asks about Rome; the constrained output is a call whatever the model
    # would have written, read back whole and streamed alike.
    for choice in ("required", {"type": "function", "function": {"name": "get_weather"}}):
        reply = client.chat.completions.create(
            model="SmolLM2-135M-Instruct.Q4_1", messages=few_shot_weather("Rome"),
            tools=[WEATHER_TOOL], tool_choice=choice, max_tokens=60, temperature=0)
        calls = reply.choices[0].message.tool_calls
        assert [c.function.name for c in calls] == ["get_weather"], reply
        assert "city" in json.loads(calls[0].function.arguments)
        assert reply.choices[0].finish_reason == "tool_calls"
        stream = client.chat.completions.create(
            model="SmolLM2-135M-Instruct.Q4_1", messages=few_shot_weather("Rome"),
            tools=[WEATHER_TOOL], tool_choice=choice, max_tokens=60, temperature=0, stream=True)
        streamed = [d for chunk in stream if chunk.choices
                    for d in (chunk.choices[0].delta.tool_calls or [])]
        assert [d.function.arguments for d in streamed] == [calls[0].function.arguments]


def test_bad_tools_and_choices_are_400s_and_the_cluster_serves_on(client):
    kwargs = dict(model="SmolLM2-135M-Instruct.Q4_1", messages=few_shot_weather("Rome"),
                  max_tokens=4)
    for extra, param in (
        ({"tools": [{"type": "function", "function": {"description": "no name"}}]},
         "tools[0].function.name"),
        ({"tools": [WEATHER_TOOL],
          "tool_choice": {"type": "function", "function": {"name": "get_time"}}},
         "tool_choice"),
        ({"tools": [WEATHER_TOOL], "tool_choice": "required",
          "response_format": {"type": "json_object"}}, "tool_choice"),
        ({"tool_choice": "required"}, "tool_choice"),
    ):
        with pytest.raises(openai.BadRequestError) as error:
            client.chat.completions.create(**kwargs, **extra)
        assert error.value.body["param"] == param
    assert client.chat.completions.create(**kwargs, tools=[WEATHER_TOOL]).choices


def test_tokenize_renders_the_tools(client):
    import httpx2 as httpx
    base = str(client.base_url).removesuffix("/v1/")
    with_tools = httpx.post(f"{base}/tokenize", json={
        "messages": [{"role": "user", "content": "Hi"}], "tools": [WEATHER_TOOL]}).json()
    without = httpx.post(f"{base}/tokenize", json={
        "messages": [{"role": "user", "content": "Hi"}]}).json()
    text = httpx.post(f"{base}/detokenize", json={"tokens": with_tools["tokens"]}).json()["prompt"]
    assert "<tools>\n" + json.dumps(WEATHER_TOOL) + "\n</tools>" in text
    assert with_tools["count"] > without["count"]
