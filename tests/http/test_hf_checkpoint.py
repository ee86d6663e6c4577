"""A Hugging Face checkpoint served by `baton up` (prefill and decode in separate processes),
through the official `openai` client: the tiny checkpoint transformers made from the tiny synthetic
model (tests/data/hf/tiny, F32) is served under its directory's name and completes a prompt token
for token as the GGUF it came from does on a second cluster; quantized at load (`quantize: q8_0`
in the cluster file) it serves too, with the same id; a chat request it has no template for is a
400 and the cluster serves on.
"""

import subprocess

import openai
import pytest

from baton_cluster import BINARY, ROOT, running_cluster

CHECKPOINT = ROOT / "tests" / "data" / "hf" / "tiny"
PROMPT = [72, 101, 108, 108, 111, 32, 119, 111, 114, 108, 100]  # token ids; any in its vocabulary


def cluster_yaml(model, quantize=None):
    lines = [f"model: {model}", "host: 127.0.0.1", "router:", "  port: 0", "  http_port: 0",
             "prefill:", "  - threads: 1", "decode:", "  - threads: 1", "    kv_cache_memory: 64M"]
    if quantize:
        lines.insert(1, f"quantize: {quantize}")
    return "\n".join(lines) + "\n"


def complete(url, model_id):
    client = openai.OpenAI(base_url=url, api_key="unused", max_retries=0, timeout=120)
    assert [m.id for m in client.models.list().data] == [model_id]
    out = client.completions.create(model=model_id, prompt=PROMPT, max_tokens=12, temperature=0)
    assert out.usage.prompt_tokens == len(PROMPT)
    assert out.usage.completion_tokens == 12
    return client, out.choices[0].text


def test_checkpoint_completes_as_its_gguf(tmp_path):
    gguf = tmp_path / "tiny.gguf"
    subprocess.run([BINARY, "make-model", "--shape", "tiny", "--out", str(gguf)], check=True,
                   stdout=subprocess.DEVNULL)
    with running_cluster(cluster_yaml(CHECKPOINT)) as url:
        client, from_checkpoint = complete(url, "tiny")
        with pytest.raises(openai.BadRequestError) as error:
            client.chat.completions.create(
                model="tiny", messages=[{"role": "user", "content": "hi"}], max_tokens=4)
        assert "template" in str(error.value)
        _, again = complete(url, "tiny")
        assert again == from_checkpoint
    with running_cluster(cluster_yaml(gguf)) as url:
        _, from_gguf = complete(url, "tiny")
    assert from_checkpoint == from_gguf
    assert from_checkpoint


def test_checkpoint_quantized_at_load():
    with running_cluster(cluster_yaml(CHECKPOINT, quantize="q8_0")) as url:
        _, text = complete(url, "tiny")
    assert text
