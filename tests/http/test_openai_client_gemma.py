"""Gemma 3 270M (the gemma3 architecture, real weights) served by a `baton up` cluster, prefill
and decode in separate processes, driven by the official `openai` client.

The model file comes from scripts/fetch_model.sh. Its GGUF has no chat template, so the router
is told `--chat-template gemma`. Greedy decoding is checked against llama.cpp's own
(llama-simple of the llama.cpp that scripts/reference/README.md names, same file and prompts).
"""

import openai
import pytest

from baton_cluster import ROOT, running_cluster

MODEL = ROOT / "models" / "gemma-3-270m-q4_k_m.gguf"

CLUSTER_YAML = f"""\
host: 127.0.0.1
model: {MODEL}
router:
  port: 0
  http_port: 0
  args: ["--chat-template", "gemma"]
prefill:
  - threads: 1
decode:
  - threads: 1
    kv_cache_memory: 128M
"""

# llama.cpp's greedy continuation of PROMPT on the same file, split into the model's tokens:
# `llama-simple -m models/gemma-3-270m-q4_k_m.gguf -n 16 "The capital of France is"` printed
# " the capital of the country of France. It is the largest city in France.\n".
PROMPT = "The capital of France is"
LLAMA_PIECES = [" the", " capital", " of", " the", " country", " of", " France", ".", " It", " is",
                " the", " largest", " city", " in", " France", "."]
# Where the two engines' arithmetic (each quantizes the activations of its products its own way)
# may pick the other of two nearly equally probable tokens: llama.cpp's token must then be
# within this many nats of baton's. Measured: " capital" -1.912 against " largest" -1.972 after
# "... It is the".
NEAR_TIE_NATS = 0.15

# The chat of test_chat_*, rendered with Gemma's template, and llama.cpp's greedy continuation of
# it (llama-simple -n 24 on the rendered text; its last token, "\n", is a near tie with baton's
# "."). The file is Gemma 3 270M's pretrained model, not the instruction-tuned one: it continues
# the turn rather than answering it.
CHAT = [
    {"role": "system", "content": "Answer in one short sentence."},
    {"role": "user", "content": "What is the capital of France?"},
]
CHAT_RENDERED = (
    "<start_of_turn>user\nAnswer in one short sentence.\n\nWhat is the capital of France?"
    "<end_of_turn>\n<start_of_turn>model\n"
)
LLAMA_CHAT_PREFIX = (
    "Answer in one short sentence.\n\nWhat is the capital of France? mendatang\ncourse\n"
    "Answer in one short sentence"
)


@pytest.fixture(scope="module")
def client():
    assert MODEL.exists(), f"{MODEL} is missing: run scripts/fetch_model.sh"
    with running_cluster(CLUSTER_YAML) as url:
        yield openai.OpenAI(base_url=url, api_key="unused", max_retries=0, timeout=120)


def test_the_model_is_listed_by_its_file_name(client):
    models = client.models.list()
    assert [m.id for m in models.data] == ["gemma-3-270m-q4_k_m"]


def test_greedy_decoding_follows_llama_cpp_token_by_token(client):
    # Teacher-forced along llama.cpp's output: at each step baton's greedy token is llama.cpp's,
    # or llama.cpp's is a near tie of it.
    exact = 0
    for i, want in enumerate(LLAMA_PIECES):
        response = client.completions.create(
            model="gemma-3-270m-q4_k_m",
            prompt=PROMPT + "".join(LLAMA_PIECES[:i]),
            max_tokens=1,
            temperature=0,
            logprobs=5,
        )
        got = response.choices[0].text
        if got == want:
            exact += 1
            continue
        top = response.choices[0].logprobs.top_logprobs[0]
        assert want in top, f"step {i}: llama.cpp's {want!r} is not in baton's top 5 {top}"
        assert top[got] - top[want] < NEAR_TIE_NATS, f"step {i}: {got!r} {top}"
    assert exact >= len(LLAMA_PIECES) - 1


def expect_llama_cpp_or_a_near_tie(client, prompt, text, llama_text):
    """`text` (baton's greedy continuation of `prompt`) is llama.cpp's, or leaves it where
    llama.cpp's next token is a near tie of baton's (the engines' arithmetic differs; on CPUs
    without AVX-512 baton's kernels sum in another order again)."""
    common = 0
    while common < min(len(text), len(llama_text)) and text[common] == llama_text[common]:
        common += 1
    if common == len(llama_text) or common == len(text):
        return
    response = client.completions.create(
        model="gemma-3-270m-q4_k_m", prompt=prompt + text[:common], max_tokens=1, temperature=0,
        logprobs=5)
    top = response.choices[0].logprobs.top_logprobs[0]
    best = max(top.values())
    rest = llama_text[common:]
    near = [piece for piece, lp in top.items()
            if piece and rest.startswith(piece) and best - lp < NEAR_TIE_NATS]
    assert near, f"at {text[:common]!r}: llama.cpp's {rest[:12]!r} is no near tie in {top}"


def test_chat_renders_gemmas_turns_and_continues_as_llama_cpp_does(client):
    whole = client.chat.completions.create(
        model="gemma-3-270m-q4_k_m", messages=CHAT, max_tokens=24, temperature=0
    )
    text = whole.choices[0].message.content
    expect_llama_cpp_or_a_near_tie(client, CHAT_RENDERED, text, LLAMA_CHAT_PREFIX)
    # The chat's prompt is exactly Gemma's rendering: the same greedy text as the rendered prompt
    # sent as plain text (its special-token text recognized).
    raw = client.completions.create(
        model="gemma-3-270m-q4_k_m", prompt=CHAT_RENDERED, max_tokens=24, temperature=0
    )
    assert raw.choices[0].text == text
    assert raw.usage.prompt_tokens == whole.usage.prompt_tokens == 23
    stream = client.chat.completions.create(
        model="gemma-3-270m-q4_k_m", messages=CHAT, max_tokens=24, temperature=0, stream=True
    )
    streamed = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    assert streamed == text


def test_tokenize_without_special_tokens_leaves_out_the_bos(client):
    """Gemma's tokenizer adds BOS: lm-evaluation-harness's remote tokenizer asks without it."""
    import httpx2 as httpx
    base = str(client.base_url).removesuffix("/v1/")
    info = httpx.get(f"{base}/tokenizer_info").json()
    assert info["add_bos_token"] is True and info["bos_token"] == "<bos>"
    with_bos = httpx.post(f"{base}/tokenize", json={"prompt": "Hello world"}).json()["tokens"]
    without = httpx.post(f"{base}/tokenize",
                         json={"prompt": "Hello world", "add_special_tokens": False}).json()
    assert with_bos[1:] == without["tokens"] and len(with_bos) == len(without["tokens"]) + 1
