"""lm-evaluation-harness (`lm_eval`, in .venv-test) on tests/data/lm_eval's multiple-choice task:
what tests/http/test_lm_eval.py and bench/lm_eval_vs_llama_cpp.py run."""

import glob
import json
import os
import pathlib
import subprocess
import sys
import tempfile

TASK_DIR = pathlib.Path(__file__).resolve().parents[2] / "tests" / "data" / "lm_eval"
TASK = "baton_multiple_choice"
REFERENCE = TASK_DIR / "llama_cpp_reference.json"
TIMEOUT_S = 600


def run_lm_eval(model_type, model_args):
    """Runs the task with lm_eval's `model_type` (local-completions, gguf, ...) and its
    `model_args`, offline; returns {doc_id: (acc, [log-likelihood of each choice])}."""
    with tempfile.TemporaryDirectory() as out:
        env = dict(os.environ, HF_DATASETS_OFFLINE="1", HF_HUB_OFFLINE="1", HF_HOME=out,
                   TOKENIZERS_PARALLELISM="false")
        command = [sys.executable, "-m", "lm_eval", "--model", model_type,
                   "--model_args", model_args, "--tasks", TASK, "--include_path", ".",
                   "--output_path", out, "--log_samples"]
        done = subprocess.run(command, cwd=TASK_DIR, env=env, capture_output=True, text=True,
                              timeout=TIMEOUT_S)
        if done.returncode != 0:
            raise RuntimeError(f"lm_eval failed:\n{done.stdout[-3000:]}{done.stderr[-3000:]}")
        files = glob.glob(f"{out}/**/samples_{TASK}_*.jsonl", recursive=True)
        if len(files) != 1:
            raise RuntimeError(f"lm_eval wrote {files}, not one samples file")
        samples = {}
        for line in pathlib.Path(files[0]).read_text().splitlines():
            sample = json.loads(line)
            samples[sample["doc_id"]] = (
                sample["acc"], [float(resp[0][0]) for resp in sample["resps"]])
        return samples
