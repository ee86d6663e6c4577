"""The router's OpenAI-compatible HTTP API driven by the official `openai` Python client.

A small local cluster (`baton up`: the router, one prefill and one decode worker on 127.0.0.1)
is started once for the module, and once more with a speculating decode worker; its "http: HOST:PORT" line gives the API's address. BATON_BINARY
names the `baton` to test (default: build/bin/baton).
"""

import openai
import pytest

from baton_cluster import running_cluster, small_cluster_yaml


# Every test runs on a cluster whose decode worker decodes plainly and on one that speculates
# (n-gram prompt lookup): the API's answers are the same.
@pytest.fixture(scope="module", params=[(), ("--speculative", "ngram")], ids=["plain", "ngram"])
def base_url(request):
    with running_cluster(small_cluster_yaml(request.param)) as url:
        yield url


@pytest.fixture(scope="module")
def client(base_url):
    # No API key is configured on the router; the client insists on sending one.
    return openai.OpenAI(base_url=base_url, api_key="unused", max_retries=0, timeout=120)


@pytest.fixture(scope="module")
def model(client):
    models = client.models.list()
    assert len(models.data) == 1
    assert models.data[0].object == "model"
    return models.data[0].id


CHAT = [
    {"role": "system", "content": "You are a concise assistant."},
    {"role": "user", "content": "Name three colors of the rainbow."},
]


def test_chat_completion(client, model):
    response = client.chat.completions.create(
        model=model, messages=CHAT, max_tokens=16, temperature=0
    )
    assert response.id.startswith("chatcmpl-")
    assert response.object == "chat.completion"
    assert response.model == model
    assert len(response.choices) == 1
    choice = response.choices[0]
    assert choice.index == 0
    assert choice.message.role == "assistant"
    assert choice.message.content
    assert choice.finish_reason in ("stop", "length")
    usage = response.usage
    assert usage is not None
    assert usage.prompt_tokens > 0
    assert 0 < usage.completion_tokens <= 16
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens


def test_chat_streaming_equals_non_streaming(client, model):
    whole = client.chat.completions.create(
        model=model, messages=CHAT, max_tokens=16, temperature=0
    )
    stream = client.chat.completions.create(
        model=model,
        messages=CHAT,
        max_tokens=16,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    assert chunks[0].object == "chat.completion.chunk"
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    finish = [c.choices[0].finish_reason for c in chunks if c.choices]
    finish = [f for f in finish if f]
    assert text == whole.choices[0].message.content
    assert finish == [whole.choices[0].finish_reason]
    # include_usage: a last chunk with the usage and no choices.
    assert chunks[-1].choices == []
    assert chunks[-1].usage is not None
    assert chunks[-1].usage.completion_tokens == whole.usage.completion_tokens
    assert chunks[-1].usage.prompt_tokens == whole.usage.prompt_tokens
    assert all(c.usage is None for c in chunks[:-1])


def test_a_repeated_prompt_reports_its_cached_tokens_and_the_same_text(client, model):
    prompt = "The lighthouse keeper wrote in his log every night. " * 6
    first = client.completions.create(model=model, prompt=prompt, max_tokens=8, temperature=0)
    again = client.completions.create(model=model, prompt=prompt, max_tokens=8, temperature=0)
    assert again.choices[0].text == first.choices[0].text
    details = again.usage.prompt_tokens_details
    assert details is not None
    # The prefix cache holds the prompt in whole blocks, its last token always computed.
    assert 0 < details.cached_tokens < again.usage.prompt_tokens


def test_a_cache_salt_shares_cached_kv_only_with_the_same_salt(client, model):
    prompt = "The harbour master counted the boats that came in at dawn. " * 6

    def cached(salt):
        extra = {"cache_salt": salt} if salt else None
        response = client.completions.create(
            model=model, prompt=prompt, max_tokens=4, temperature=0, extra_body=extra
        )
        return response.choices[0].text, response.usage.prompt_tokens_details.cached_tokens

    text, _ = cached(None)  # now cached without a salt
    salted_text, salted_cached = cached("tenant-b")
    assert salted_cached == 0
    assert salted_text == text
    again_text, again_cached = cached("tenant-b")
    assert again_cached > 0
    assert again_text == text
    with pytest.raises(openai.BadRequestError):
        cached("x" * 257)


def test_completion(client, model):
    response = client.completions.create(
        model=model, prompt="The capital of France is", max_tokens=8, temperature=0
    )
    assert response.id.startswith("cmpl-")
    assert response.object == "text_completion"
    assert response.model == model
    choice = response.choices[0]
    assert choice.text
    assert choice.finish_reason == "length"
    assert response.usage.completion_tokens == 8
    assert response.usage.total_tokens == response.usage.prompt_tokens + 8


def test_completion_streaming_equals_non_streaming(client, model):
    prompt = "Once upon a time"
    whole = client.completions.create(model=model, prompt=prompt, max_tokens=12, temperature=0)
    chunks = list(
        client.completions.create(
            model=model,
            prompt=prompt,
            max_tokens=12,
            temperature=0,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    text = "".join(c.choices[0].text for c in chunks if c.choices)
    assert text == whole.choices[0].text
    assert chunks[-1].choices == []
    assert chunks[-1].usage.completion_tokens == whole.usage.completion_tokens
    # Without stream_options there is no usage chunk.
    plain = list(
        client.completions.create(
            model=model, prompt=prompt, max_tokens=12, temperature=0, stream=True
        )
    )
    assert all(c.choices for c in plain)
    assert "".join(c.choices[0].text for c in plain) == whole.choices[0].text


def test_seed_and_stop(client, model):
    kwargs = dict(model=model, prompt="List some fruits:", max_tokens=12, temperature=0.8, seed=7)
    first = client.completions.create(**kwargs)
    second = client.completions.create(**kwargs)
    assert first.choices[0].text == second.choices[0].text
    stopped = client.completions.create(
        model=model, prompt="1, 2, 3, 4,", max_tokens=16, temperature=0, stop=[" 6"]
    )
    assert " 6" not in stopped.choices[0].text
    assert stopped.choices[0].finish_reason == "stop"


def test_chat_logprobs_name_each_generated_token(client, model):
    response = client.chat.completions.create(
        model=model, messages=CHAT, max_tokens=12, temperature=0, logprobs=True, top_logprobs=3
    )
    choice = response.choices[0]
    content = choice.logprobs.content
    assert len(content) == response.usage.completion_tokens
    for entry in content:
        assert len(entry.top_logprobs) == 3
        # Greedy: the generated token is the most likely one.
        assert entry.token == entry.top_logprobs[0].token
        assert entry.logprob == pytest.approx(entry.top_logprobs[0].logprob)
        tops = [t.logprob for t in entry.top_logprobs]
        assert tops == sorted(tops, reverse=True)
        assert tops[0] <= 0
        if "\ufffd" not in entry.token:  # not a piece of a character
            assert bytes(entry.bytes) == entry.token.encode()
    if choice.finish_reason == "length":
        assert "".join(entry.token for entry in content) == choice.message.content
    plain = client.chat.completions.create(model=model, messages=CHAT, max_tokens=12, temperature=0)
    assert plain.choices[0].logprobs is None
    assert plain.choices[0].message.content == choice.message.content


def test_completion_logprobs_stream_as_they_answer_whole(client, model):
    kwargs = dict(
        model=model, prompt="The capital of France is", max_tokens=8, temperature=0, logprobs=2
    )
    whole = client.completions.create(**kwargs).choices[0]
    logprobs = whole.logprobs
    assert len(logprobs.tokens) == 8
    assert "".join(logprobs.tokens) == whole.text
    offsets = [sum(len(t) for t in logprobs.tokens[:i]) for i in range(len(logprobs.tokens))]
    assert logprobs.text_offset == offsets
    for token, logprob, top in zip(logprobs.tokens, logprobs.token_logprobs, logprobs.top_logprobs):
        # Greedy: the generated token is the most likely of the two.
        assert len(top) == 2
        assert top[token] == pytest.approx(logprob)
        assert max(top.values()) == pytest.approx(logprob)
    chunks = list(client.completions.create(stream=True, **kwargs))
    streamed = [c.choices[0].logprobs for c in chunks if c.choices and c.choices[0].logprobs]
    assert [t for lp in streamed for t in lp.tokens] == logprobs.tokens
    assert [o for lp in streamed for o in lp.text_offset] == logprobs.text_offset
    assert [x for lp in streamed for x in lp.token_logprobs] == pytest.approx(
        logprobs.token_logprobs
    )


PARIS, ZEBRA = "7042", "29106"  # the default model's token ids of " Paris" and " zebra"


def test_completion_echo_scores_the_prompt(client, model):
    prompt = "The capital of France is"
    response = client.completions.create(
        model=model, prompt=prompt, max_tokens=2, temperature=0, echo=True, logprobs=2)
    choice = response.choices[0]
    assert choice.text.startswith(prompt)
    logprobs = choice.logprobs
    n_prompt = response.usage.prompt_tokens
    assert len(logprobs.tokens) == n_prompt + response.usage.completion_tokens
    assert "".join(logprobs.tokens) == choice.text
    assert logprobs.token_logprobs[0] is None and logprobs.top_logprobs[0] is None
    assert all(lp <= 0 for lp in logprobs.token_logprobs[1:])
    # Each scored position lists its two most likely tokens, and the scored one.
    assert all(2 <= len(top) <= 3 for top in logprobs.top_logprobs[1:])
    assert logprobs.text_offset[n_prompt] == len(prompt)
    # A prompt token's score is what the token has when generated after the tokens before it
    # (greedily, " of" follows "The capital").
    start = client.completions.create(
        model=model, prompt="The capital", max_tokens=1, temperature=0, logprobs=0)
    assert start.choices[0].logprobs.tokens[0] == logprobs.tokens[2] == " of"
    assert start.choices[0].logprobs.token_logprobs[0] == logprobs.token_logprobs[2]
    with pytest.raises(openai.BadRequestError) as error:
        client.completions.create(model=model, prompt=prompt, echo=True, stream=True)
    assert error.value.body["param"] == "echo"


def test_n_choices_each_with_its_seed_and_best_of(client, model):
    kwargs = dict(model=model, prompt="Once upon a time", max_tokens=5, temperature=1.0)
    alone = [client.completions.create(seed=11 + i, logprobs=0, **kwargs).choices[0]
             for i in range(3)]
    several = client.completions.create(seed=11, n=3, **kwargs)
    assert [c.index for c in several.choices] == [0, 1, 2]
    assert [c.text for c in several.choices] == [c.text for c in alone]
    assert several.usage.completion_tokens == sum(len(c.logprobs.tokens) for c in alone)
    best = client.completions.create(seed=11, best_of=3, **kwargs)
    sums = [sum(c.logprobs.token_logprobs) for c in alone]
    assert best.choices[0].text == alone[sums.index(max(sums))].text
    chat = client.chat.completions.create(
        model=model, messages=CHAT, max_tokens=4, n=2, seed=5, temperature=1.0)
    assert [c.index for c in chat.choices] == [0, 1]
    with pytest.raises(openai.BadRequestError) as error:
        client.completions.create(n=17, **kwargs)
    assert error.value.body["param"] == "n"
    with pytest.raises(openai.BadRequestError) as error:
        client.completions.create(n=2, best_of=1, **kwargs)
    assert error.value.body["param"] == "best_of"


def test_logit_bias_bans_and_forces_tokens(client, model):
    kwargs = dict(
        model=model, prompt="The capital of France is", max_tokens=3, temperature=0, logprobs=0
    )
    plain = client.completions.create(**kwargs).choices[0]
    assert plain.logprobs.tokens[0] == " Paris"
    banned = client.completions.create(logit_bias={PARIS: -100}, **kwargs).choices[0]
    assert " Paris" not in banned.logprobs.tokens
    forced = client.completions.create(logit_bias={ZEBRA: 100}, **kwargs).choices[0]
    assert forced.logprobs.tokens == [" zebra"] * 3
    # The log-probabilities are the model's own, before the bias.
    assert forced.logprobs.token_logprobs[0] < -5
    with pytest.raises(openai.BadRequestError) as error:
        client.completions.create(logit_bias={"49152": 1}, **kwargs)
    assert "logit_bias" in error.value.body["message"]


def test_bad_requests_raise_bad_request_error(client, model):
    with pytest.raises(openai.BadRequestError) as error:
        client.chat.completions.create(model=model, messages=CHAT, temperature=-1)
    assert error.value.status_code == 400
    assert error.value.body["param"] == "temperature"
    assert error.value.body["type"] == "invalid_request_error"
    with pytest.raises(openai.BadRequestError):
        client.completions.create(model=model, prompt="Hi", n=17)
    with pytest.raises(openai.BadRequestError):
        client.completions.create(model=model, prompt="", max_tokens=4)
    with pytest.raises(openai.BadRequestError) as error:
        client.chat.completions.create(model=model, messages=CHAT, top_logprobs=2)
    assert error.value.body["param"] == "top_logprobs"
    with pytest.raises(openai.BadRequestError):
        client.completions.create(model=model, prompt="Hi", logprobs=21)


def test_unknown_model_raises_not_found(client):
    with pytest.raises(openai.NotFoundError) as error:
        client.completions.create(model="gpt-4", prompt="Hi", max_tokens=4)
    assert error.value.status_code == 404
    assert error.value.body["code"] == "model_not_found"
