"""Structured output through real clients against `baton up` clusters (prefill and decode in
separate processes): the official `openai` package's `parse` with a pydantic model, JSON mode, vLLM's
regex / choice / EBNF grammar parameters, tool_choice "required" and a named function, LangChain's
`with_structured_output` in both of its methods; each output checked against its constraint. The
same requests, seeded, give the same outputs on a cluster whose decode worker speculates (with a
draft of the model itself, whose proposals the grammar mostly forbids). Constraints that do not
compile are a 400 naming the error, and the cluster serves on.
"""

import json
import re
import urllib.request

import openai
import pydantic
import pytest
from langchain_openai import ChatOpenAI

from baton_cluster import ROOT, running_cluster, small_cluster_yaml

MODEL = ROOT / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL_ID = MODEL.stem  # what /v1/models serves it as


class City(pydantic.BaseModel):
    name: str = pydantic.Field(max_length=24)
    population: int = pydantic.Field(ge=0, le=100_000_000)
    capital: bool


TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "The weather in a city",
        "parameters": {"type": "object",
                       "properties": {"city": {"type": "string", "maxLength": 24},
                                      "unit": {"enum": ["c", "f"]}},
                       "required": ["city", "unit"], "additionalProperties": False}}},
    {"type": "function", "function": {
        "name": "get_time", "description": "The time in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 24}},
                       "required": ["city"], "additionalProperties": False}}},
]

SCHEMA_ERROR = {"type": "object", "properties": {"a": {"type": "banana"}}}


@pytest.fixture(scope="module", params=["plain", "speculative"])
def cluster(request):
    assert MODEL.exists(), f"{MODEL} is missing: run scripts/fetch_model.sh"
    decode_args = ()
    if request.param == "speculative":
        decode_args = ("--speculative", f"draft:{MODEL}", "--speculative-token-cost", "0.1")
    metrics = {}
    with running_cluster(small_cluster_yaml(decode_args), metrics) as url:
        yield request.param, url, metrics


@pytest.fixture(scope="module")
def client(cluster):
    return openai.OpenAI(base_url=cluster[1], api_key="unused", max_retries=0, timeout=120)


# The plain cluster's outputs by name (its tests run first: pytest groups a module fixture's
# tests by parameter); the speculative cluster's must equal them.
PLAIN_OUTPUTS = {}


def record(cluster, name, value):
    if cluster[0] == "plain":
        PLAIN_OUTPUTS[name] = value
    else:
        assert name in PLAIN_OUTPUTS, "the plain cluster's tests run first"
        assert value == PLAIN_OUTPUTS[name], name


def chat(text):
    return [{"role": "user", "content": text}]


def test_parse_with_a_pydantic_model(cluster, client):
    for seed in range(3):
        completion = client.beta.chat.completions.parse(
            model=MODEL_ID, messages=chat("Describe a big city as JSON."), response_format=City,
            max_tokens=120, seed=seed, temperature=0.8)
        choice = completion.choices[0]
        assert choice.finish_reason == "stop", choice.message.content
        assert isinstance(choice.message.parsed, City)
        assert len(choice.message.parsed.name) <= 24
        record(cluster, f"parse-{seed}", choice.message.content)


def test_json_mode_gives_an_object(cluster, client):
    completion = client.chat.completions.create(
        model=MODEL_ID, messages=chat("Give me a JSON object about cats."), seed=1,
        response_format={"type": "json_object"}, max_tokens=200, temperature=0.7)
    text = completion.choices[0].message.content
    assert completion.choices[0].finish_reason == "stop", text
    assert isinstance(json.loads(text), dict)
    record(cluster, "json_object", text)


def test_json_schema_streamed(cluster, client):
    stream = client.chat.completions.create(
        model=MODEL_ID, messages=chat("A city, please."), seed=2, stream=True, max_tokens=120,
        response_format={"type": "json_schema", "json_schema": {
            "name": "city", "schema": City.model_json_schema(), "strict": True}})
    text = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
    City.model_validate_json(text)
    record(cluster, "stream", text)


def test_regex_choice_and_grammar_on_completions(cluster, client):
    regex = r"[A-Z][a-z]{2,8}, [0-9]{1,3} (km|mi)"
    for seed in range(3):
        text = client.completions.create(
            model=MODEL_ID, prompt="Distance to the sea:", max_tokens=40, seed=seed,
            extra_body={"structured_outputs": {"regex": regex}}).choices[0].text
        assert re.fullmatch(regex, text), text
        record(cluster, f"regex-{seed}", text)
    choices = ["positive", "negative", "neutral"]
    text = client.completions.create(
        model=MODEL_ID, prompt="Sentiment of 'I love it':", max_tokens=10,
        extra_body={"guided_choice": choices}).choices[0].text
    assert text in choices
    grammar = 'root ::= "(" num (("+" | "*") num)* ")"\nnum ::= [1-9] [0-9]?'
    text = client.completions.create(
        model=MODEL_ID, prompt="An arithmetic expression:", max_tokens=40, seed=3,
        extra_body={"guided_grammar": grammar}).choices[0].text
    assert re.fullmatch(r"\([1-9][0-9]?([+*][1-9][0-9]?)*\)", text), text
    record(cluster, "grammar", text)


def test_tool_choice_required_and_named(cluster, client):
    completion = client.chat.completions.create(
        model=MODEL_ID, messages=chat("What is the weather in Rome?"), tools=TOOLS,
        tool_choice="required", max_tokens=150, seed=4)
    choice = completion.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.tool_calls
    for call in choice.message.tool_calls:
        assert call.function.name in ("get_weather", "get_time")
        assert "city" in json.loads(call.function.arguments)
    record(cluster, "required", [c.function.model_dump() for c in choice.message.tool_calls])

    completion = client.chat.completions.create(
        model=MODEL_ID, messages=chat("What time is it in Oslo?"), tools=TOOLS,
        tool_choice={"type": "function", "function": {"name": "get_time"}}, max_tokens=150,
        seed=5)
    calls = completion.choices[0].message.tool_calls
    assert [c.function.name for c in calls] == ["get_time"]
    assert set(json.loads(calls[0].function.arguments)) == {"city"}
    record(cluster, "named", calls[0].function.arguments)


@pytest.mark.parametrize("method", ["json_schema", "function_calling"])
def test_langchain_with_structured_output(cluster, method):
    llm = ChatOpenAI(base_url=cluster[1], api_key="unused", model=MODEL_ID, max_tokens=120,
                     temperature=0, max_retries=0, timeout=120)
    city = llm.with_structured_output(City, method=method).invoke("Describe Paris.")
    assert isinstance(city, City)
    record(cluster, f"langchain-{method}", city.model_dump())


def test_constraints_that_do_not_compile_are_a_400(cluster, client):
    for extra in ({"response_format": {"type": "json_schema",
                                       "json_schema": {"name": "x", "schema": SCHEMA_ERROR}}},
                  {"extra_body": {"structured_outputs": {"regex": "(unclosed"}}},
                  {"extra_body": {"guided_grammar": "root ::= "}}):
        with pytest.raises(openai.BadRequestError) as error:
            client.chat.completions.create(model=MODEL_ID, messages=chat("x"), max_tokens=5,
                                           **extra)
        assert "does not compile" in str(error.value)
    with pytest.raises(openai.BadRequestError) as error:
        client.chat.completions.create(
            model=MODEL_ID, messages=chat("x"), tools=[{"type": "function", "function": {}}])
    assert "name" in str(error.value)
    # The cluster serves on.
    assert client.completions.create(model=MODEL_ID, prompt="Hi", max_tokens=3).choices[0].text


def counter(metrics_address, name):
    text = urllib.request.urlopen(f"http://{metrics_address}/metrics", timeout=10).read().decode()
    values = [float(line.split()[-1]) for line in text.splitlines() if line.startswith(name)]
    return sum(values)


def test_the_speculative_cluster_speculated_and_the_grammar_rejected_proposals(cluster):
    """Runs last on each cluster: the decode worker's speculation counters over the tests above."""
    decode = cluster[2]["decode[0]"]
    drafted = counter(decode, "baton:spec_decode_num_draft_tokens_total")
    accepted = counter(decode, "baton:spec_decode_num_accepted_tokens_total")
    if cluster[0] == "plain":
        assert drafted == 0
    else:
        assert drafted > 0
        assert accepted < drafted  # the unconstrained draft's proposals the grammar forbids
