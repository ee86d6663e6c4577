#!/usr/bin/env python3
"""Generate tokenizer reference data from llama.cpp (via llama-cpp-python).

Writes tests/data/tokenizer/smollm2_corpus.jsonl: one JSON object per input,
    {"hex": <input bytes as hex>, "ids": [...], "ids_special": [...], "ids_bos": [...]}
where
    ids         = llm.tokenize(b, add_bos=False, special=False)
    ids_special = llm.tokenize(b, add_bos=False, special=True)
    ids_bos     = llm.tokenize(b, add_bos=True,  special=False)
If llama.cpp fails on an input, the corresponding field is replaced by
{"error": "<message>"} instead (and reported on stderr); no input is dropped.
Note: llama.cpp (as of llama-cpp-python 0.3.16) *aborts the process* (uncaught
std::invalid_argument "invalid codepoint") on byte sequences that its lenient UTF-8
decoder turns into code points above U+10FFFF (e.g. F4 90 80 80, F5 80 80 80), so
tokenization runs in a worker subprocess that is restarted after such a crash.

The corpus is deterministic: hand-written lists plus combinations drawn from
random.Random(1234).  See README.md in this directory.

Usage: make_tokenizer_corpus.py [MODEL.gguf] [-o OUT.jsonl]
"""
import argparse
import json
import os
import random
import sys

REPO_ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
DEFAULT_MODEL = os.path.join(REPO_ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
DEFAULT_OUT = os.path.join(REPO_ROOT, "tests", "data", "tokenizer", "smollm2_corpus.jsonl")


def u(s):
    return s.encode("utf-8")


# ---------------------------------------------------------------------------
# Hand-written pieces (str unless noted).  Each list is a category.
# ---------------------------------------------------------------------------

ASCII_SENTENCES = [
    "Hello world",
    "Hello, world!",
    "The quick brown fox jumps over the lazy dog.",
    "A journey of a thousand miles begins with a single step.",
    "She sells sea shells by the sea shore.",
    "To be, or not to be, that is the question.",
    "In 1492, Columbus sailed the ocean blue.",
    "The meeting starts at 9:30 a.m. on Monday, March 3rd.",
    "Why? Because I said so!",
    "e.g. i.e. etc. vs. Mr. Mrs. Dr. St.",
    "THIS SENTENCE IS WRITTEN IN ALL CAPS.",
    "this sentence is written in all lower case",
    "CamelCaseIdentifiersAreCommonInCode",
    "snake_case_identifiers_are_common_too",
    "kebab-case-words-appear-in-urls",
    "https://www.example.com/path/to/page?query=1&other=two#frag",
    "user@example.com sent mail to admin@test.org",
    "a",
    "A",
    "I",
    " a",
    "ab",
    "abc",
    "Supercalifragilisticexpialidocious",
    "antidisestablishmentarianism",
    "pneumonoultramicroscopicsilicovolcanoconiosis",
    "The cat sat on the mat. The dog sat on the log.",
    "Machine learning models tokenize text into subword units.",
    "What is the capital of France?",
    "Once upon a time, there was a little girl named Red Riding Hood.",
    "x",
    "hello",
    "Hello",
    "HELLO",
    "hElLo WoRlD",
    "Tokenization is harder than it looks.",
]

WHITESPACE = [
    " ", "  ", "   ", "    ", "        ", " " * 17, " " * 64,
    "\t", "\t\t", "\t\t\t\t", "\n", "\n\n", "\n\n\n", "\n" * 10,
    "\r\n", "\r\n\r\n", "\r", " \n", "\n ", " \n ", "\t\n", "\n\t",
    " \t \t ", "\n \n \n", "  \n\n  \t\t", "\x0b", "\x0c", "\x0b\x0c",
    " hello", "  hello", "   hello", "hello ", "hello  ", "hello   ",
    " hello ", "\thello", "hello\t", "\nhello", "hello\n", "\n\nhello\n\n",
    "hello world", "hello  world", "hello   world", "hello\tworld",
    "hello\nworld", "hello\n\nworld", "hello \n world", "hello\r\nworld",
    "    indented line", "\tindented with tab", "line one\n    line two\n        line three",
    "a b c d e f g", "a  b   c    d", "trailing spaces    \n", "word \t\n word",
    "\u00a0", "a\u00a0b", "\u2003em space", "ideographic\u3000space",
    "\u2028line separator", "para\u2029separator", "\u0085next line",
    " \u00a0 ", "1 000 000",
]

NUMBERS = [
    "0", "1", "7", "12", "123", "1234", "12345", "123456", "1234567",
    "3.14159", "2.718281828459045", "-42", "+17", "1e10", "6.022e23",
    "1,000,000", "1.000.000,00", "0x1F", "0xDEADBEEF", "0b101010", "007",
    "2024-01-15", "12:34:56", "192.168.0.1", "+1 (555) 123-4567",
    "3141592653589793238462643383279502884197169399375105820974944592",
    "99999999999999999999", "1000000000000", "00000000", "10 20 30 40 50",
    "abc123def456", "v1.2.3", "x86_64", "3rd 4th 21st 22nd", "1/2 3/4 7/8",
    "$100", "€50", "£3.50", "¥1000", "50%", "#1", "no.5", "a1b2c3",
    "١٢٣٤٥", "१२३४५", "一二三", "①②③", "Ⅻ", "½ ¾",
]

PUNCT = [
    ".", ",", "!", "?", "...", "!!!", "???", "?!", "!?!?", "--", "---", "—", "–",
    "...!!!???", "!@#$%^&*()", "()[]{}<>", "<<>>", "\"\"", "''", "``", "~~~",
    "***", "___", "===", "+++", "-->", "<--", "=>", "->", "::", ";;", "//", "\\\\",
    "/* */", "# ## ###", "&&", "||", "|", "<", ">", "<|", "|>", "<||>", "<|>",
    "«quoted»", "“smart quotes”", "‘single’", "¿Qué?", "¡Hola!", "…", "•",
    "§ ¶ © ® ™", "°C", "±", "×÷", "≠≤≥", "∑∏∫", "→←↑↓", "@user", "#hashtag",
    "hello...world", "wait—what?", "end.", "(parenthetical)", "[bracketed]",
    "{braced}", "\"quoted text\"", "'single quoted'", "a,b,c", "a;b;c", "a.b.c",
]

CONTRACTIONS = [
    "it's", "IT'S", "It's", "don't", "DON'T", "Don't", "you're", "YOU'RE",
    "we've", "WE'VE", "I'm", "I'M", "i'm", "you'll", "YOU'LL", "he'd", "HE'D",
    "they're", "they've", "she'll", "we'd", "can't", "won't", "shouldn't",
    "John's book", "JOHN'S BOOK", "the dogs' bones", "rock 'n' roll",
    "'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'T", "'RE", "'VE", "'M",
    "'LL", "'D", "'x", "''s", "'", "it’s", "don’t", "y'all'd've", "o'clock",
    "I'd've thought so", "She said 'hello' to me", "'quoted'",
    "We're sure it's what they'd've wanted, aren't we?", "l'homme", "d'accord",
    "ain't", "'tis", "'twas", "rock'n'roll", "X'S", "1's", "it's'", "' s",
]

CODE = [
    "def foo(x):\n    return x + 1\n",
    "import numpy as np\nimport torch.nn.functional as F\n",
    "for i in range(10):\n\tprint(i)\n",
    "class Foo(Base):\n    def __init__(self, a, b=None):\n        super().__init__()\n        self.a = a\n",
    "if x == 0 and not y:\n    pass\nelif x != 1:\n    raise ValueError(\"bad\")\n",
    "lambda x: x ** 2 if x >= 0 else -x",
    "print(f\"{name!r:>10} = {value:.3f}\")",
    "# comment\n'''docstring'''\n\"\"\"another\"\"\"",
    "#include <iostream>\n#include <vector>\n",
    "int main(int argc, char** argv) {\n    std::cout << \"hi\" << std::endl;\n    return 0;\n}\n",
    "template <typename T>\nstd::vector<T> v{1, 2, 3};\n",
    "auto p = std::make_unique<Foo>(); p->bar(); x <<= 2; y >>= 1;",
    "for (size_t i = 0; i < n; ++i) { a[i] += b[i] * c; }",
    "std::map<std::string, int>::const_iterator it = m.begin();",
    "#define MAX(a, b) ((a) > (b) ? (a) : (b))",
    "/* block comment */ // line comment",
    "{\"key\": \"value\", \"n\": 42, \"arr\": [1, 2.5, null, true, false]}",
    "{\n  \"name\": \"baton\",\n  \"version\": \"0.1.0\",\n  \"nested\": {\"a\": {\"b\": []}}\n}",
    "[{\"id\":1},{\"id\":2}]",
    "{\"unicode\": \"\\u00e9\\n\\t\"}",
    "<!DOCTYPE html>\n<html>\n<head><title>Test</title></head>\n<body>\n<p class=\"x\">Hi &amp; bye</p>\n</body>\n</html>",
    "<div id=\"main\"><a href=\"/x?a=1&b=2\">link</a></div>",
    "<br/><img src='a.png' alt=\"\"/>",
    "<script>console.log('<|im_start|>');</script>",
    "SELECT * FROM users WHERE id = 1;",
    "$ ls -la | grep foo > out.txt 2>&1",
    "fn main() { let x: Vec<u8> = vec![]; }",
    "const f = (a, b) => a ?? b;",
    "x=1;y=2;z=x+y",
    "    ",
    "\t\tif (x) {\n\t\t\treturn;\n\t\t}",
    "key: value\nlist:\n  - a\n  - b\n",
    "a = [[1,2],[3,4]]",
    "0.5f + 1e-3 - .25",
    "```python\nprint('hi')\n```",
]

MULTILINGUAL = [
    # CJK
    "你好，世界！", "中文分词测试", "我爱北京天安门", "漢字", "人工智能正在改变世界。",
    "这是一个很长的中文句子，用于测试分词器是否能够正确处理多个汉字。",
    # Japanese
    "こんにちは", "カタカナ", "ひらがなとカタカナと漢字", "東京は日本の首都です。",
    "ｶﾀｶﾅ半角", "ラーメンを食べたい！",
    # Korean
    "안녕하세요", "한국어 문장입니다.", "대한민국", "ㄱㄴㄷ", "서울은 큰 도시입니다.",
    # Arabic
    "مرحبا بالعالم", "السلام عليكم", "اللغة العربية جميلة.", "العربية and English mixed",
    # Hindi
    "नमस्ते दुनिया", "हिन्दी भाषा", "मैं ठीक हूँ।", "क्षत्रिय",
    # Cyrillic
    "Привет, мир!", "Москва", "ПРИВЕТ", "Ёлка и ёжик", "Україна", "Съешь же ещё этих мягких французских булок.",
    # Greek
    "Γειά σου κόσμε", "αβγδε", "ΑΒΓΔΕ", "Ελληνικά", "ς σ Σ", "ά έ ή ί ό ύ ώ",
    # Others
    "שלום עולם", "สวัสดีครับ", "Tiếng Việt có dấu", "Ελληνικά and English", "Ça va? Où est l'hôtel?",
    "Straße", "Größe", "ﬁ ﬂ ligatures", "ǅ ǈ ǋ", "İstanbul ıi", "ß ẞ", "Ω Å K",
    "ᚠᚢᚦᚨᚱᚲ", "ⴰⵣⵓⵍ", "ᐊᐃᐅ", "Ⴀ ა", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢", "𝐁𝐨𝐥𝐝", "𠀀𠀁", "𓀀𓀁",
]

EMOJI = [
    "😀", "😀😀😀", "Hello 😀 world", "👍", "👍🏻", "👍🏼", "👍🏽", "👍🏾", "👍🏿",
    "👨‍👩‍👧‍👦", "👩‍💻", "🏳️‍🌈", "🏴‍☠️", "❤️", "❤", "♥️", "✨🎉🎊", "🇺🇸", "🇯🇵",
    "🇺🇸🇬🇧🇫🇷", "🇦", "🏴󠁧󠁢󠁳󠁣󠁴󠁿", "1️⃣", "#️⃣", "©️", "🧑🏽‍🚀", "👩🏾‍🤝‍👨🏻",
    "🤖 + 🧠 = 💡", "I ❤️ NY", "🔥🔥🔥🔥🔥", "😂🤣", "🫠", "🦀 Rust", "🐍 Python",
]

COMBINING = [
    "e\u0301", "\u00e9", "cafe\u0301", "caf\u00e9", "a\u0300\u0301\u0302\u0303",
    "n\u0303", "\u00f1", "o\u0308", "\u00f6", "A\u030a", "\u00c5", "\u212b",
    "Z\u0351\u036b\u0343\u036a\u0302\u036b\u033d\u034f\u0334\u0319\u0324\u031e\u0349\u035a\u032f\u031e\u0320\u034dA\u0334\u0335\u031c\u0330\u0354L\u0368\u0366\u0363\u0342\u0346\u0301\u0349G\u0368\u0344\u0312O\u0358\u035a\u0330",
    "h\u0336e\u0336l\u0336l\u0336o\u0336", "\u0301", "\u0301\u0301\u0301", " \u0301",
    "\u1100\u1161\u11a8", "\uac01", "\u0915\u094d\u0937", "\u0e01\u0e34\u0e4a",
    "Ame\u0301lie", "Am\u00e9lie", "re\u0301sume\u0301", "r\u00e9sum\u00e9",
    "\u00c7a", "C\u0327a", "\u1e9b\u0323", "\u017f\u0323\u0307", "\u1e69", "s\u0323\u0307",
    "x" + "\u0300" * 20,
]

ZERO_WIDTH = [
    "a\u200bb", "\u200b", "\u200c", "\u200d", "\u2060", "\ufeff", "\ufeffhello",
    "zero\u200bwidth\u200bspace", "a\u200cb\u200dc", "\u200e\u200f", "\u202eabc\u202c",
    "\u00ad", "soft\u00adhyphen", "\u034f", "\ufe0f", "\ufe0e", "a\ufe0f",
    "\u2061\u2062\u2063\u2064", "\u180e", "word\u2060joiner",
    "\x00", "a\x00b", "\x01\x02\x03", "\x1b[31mred\x1b[0m", "\x7f", "\u0080\u009f",
    "\ue000", "\U000f0000", "\ufffd", "\ufffe", "\uffff", "\U0010ffff",
]

SPECIAL_TEXTS = [
    "<|im_start|>", "<|im_end|>", "<|endoftext|>",
    "<|im_start|>user", "<|im_start|>user\nHello<|im_end|>",
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n",
    "text before <|endoftext|> text after", "<|endoftext|><|endoftext|>",
    "<|im_end|><|im_start|>", "<|im_start|><|im_end|>", " <|im_start|>", "<|im_start|> ",
    "\n<|im_end|>\n", "a<|im_end|>b", "<|im_start|>assistant\n", "<|endoftext|>Hello",
    # near misses
    "<|im_start|", "|im_start|>", "<im_start>", "<| im_start |>", "<|IM_START|>",
    "<|im_star|>", "<|im_startt|>", "<<|im_start|>>", "<|<|im_end|>|>", "<|endoftext",
    "endoftext|>", "<|end_of_text|>", "<|eot_id|>", "<s>", "</s>", "<unk>", "<pad>",
    "<|", "|>", "<|>", "< |", "| >", "<||", "||>", "<|||>", "<|im_end|", "im_end",
    "<|im_end|>>", "<<|im_end|>", "<|im_end |>", "<|im_end|>\n<|im", "< |im_end| >",
    "<repo_name>", "<file_sep>", "<filename>", "<gh_stars>", "<issue_start>",
    "<jupyter_start>", "<reponame>", "<commit_before>", "<empty_output>",
    "a<b|c>d", "x < y | z > w", "if (a<|b|>c)", "<|im_start|>user\n<|im_start|>",
]

INVALID_UTF8 = [
    b"\x80", b"\xbf", b"\x80\x80\x80", b"abc\x80def", b"\xc3", b"\xe2\x82", b"\xf0\x9f\x98",
    b"abc\xc3", b"\xe2\x82abc", b"\xf0\x9f\x98 hello", b"\xc0\x80", b"\xc1\xbf",
    b"\xe0\x80\x80", b"\xe0\x9f\xbf", b"\xf0\x80\x80\x80", b"\xf0\x8f\xbf\xbf",
    b"\xed\xa0\x80", b"\xed\xbf\xbf", b"\xed\xa0\xbd\xed\xb8\x80", b"\xff", b"\xfe",
    b"\xff\xfe", b"\xff\xff\xff\xff", b"hello\xffworld", b"\xf5\x80\x80\x80", b"\xf8\x88\x80\x80\x80",
    b"\xfc\x84\x80\x80\x80\x80", b"\xf4\x90\x80\x80", b"\xc3\x28", b"\xa0\xa1", b"\xe2\x28\xa1",
    b"\xe2\x82\x28", b"\xf0\x28\x8c\xbc", b"\xf0\x90\x28\xbc", b"\xf0\x28\x8c\x28",
    b"caf\xe9", b"na\xefve", b"\x80hello", b"hello\x80", b" \x80 ", b"\n\xff\n",
    b"\xe4\xbd\xa0\xe5\xa5", b"\xe4\xbd\xa0\xe5\xa5\xbd\xe4", b"\xf0\x9f\x98\x80\xf0\x9f",
    b"<|im_start|>\xff", b"\xff<|im_end|>", b"<|im_\xffstart|>", b"it\x92s", b"\x93quoted\x94",
    b"\xc3\xa9\x80\xc3\xa9", b"\xce\xb1\xce", b"123\xff456", b"\xef\xbb", b"\xef\xbb\xbf",
]

MISC_LONG = [
    "The " * 50,
    "a" * 100,
    "ab" * 64,
    "=" * 80,
    "-" * 120,
    "0" * 50,
    "\n".join(["line %d" % i for i in range(30)]),
    ("Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor "
     "incididunt ut labore et dolore magna aliqua. Ut enim ad minim veniam, quis nostrud "
     "exercitation ullamco laboris nisi ut aliquip ex ea commodo consequat."),
    "😀" * 20,
    "你好" * 30,
    " " * 5 + "\n" * 5 + "\t" * 5 + " word " * 5,
]


def to_bytes(x):
    return x if isinstance(x, bytes) else u(x)


def build_corpus():
    cats = [ASCII_SENTENCES, WHITESPACE, NUMBERS, PUNCT, CONTRACTIONS, CODE,
            MULTILINGUAL, EMOJI, COMBINING, ZERO_WIDTH, SPECIAL_TEXTS, INVALID_UTF8, MISC_LONG]
    corpus = [b""]
    for cat in cats:
        corpus.extend(to_bytes(x) for x in cat)

    # NFC / NFD / NFKC / NFKD variants of accented and compatibility text.
    import unicodedata
    norm_src = ["café résumé naïve", "Ångström", "Ḱḷṃ", "ﬁancé", "Ｆｕｌｌｗｉｄｔｈ", "한국어",
                "ｶﾀｶﾅ", "Ǆemal", "élan vital", "São Paulo", "Ελληνικά ά", "Přílišžluťoučkýkůň"]
    for s in norm_src:
        for form in ("NFC", "NFD", "NFKC", "NFKD"):
            corpus.append(u(unicodedata.normalize(form, s)))

    # Seeded random combinations.
    rng = random.Random(1234)
    pool = [to_bytes(x) for cat in cats for x in cat if x]
    seps = [b"", b" ", b"  ", b"\n", b"\t", b" \n", b"\n\n", b", ", b"."]
    for _ in range(250):
        k = rng.randint(2, 5)
        parts = [rng.choice(pool) for _ in range(k)]
        out = b""
        for i, p in enumerate(parts):
            if i:
                out += rng.choice(seps)
            out += p
        corpus.append(out)

    # Random short strings over a mixed alphabet (chars and raw bytes).
    alphabet = list("aAbBzZ019 '\t\n.,!?<|>_-'") + ["é", "ß", "中", "😀", "\u0301", "\u200d",
                                                   "Ω", "ж", "ب", "न", "'s", "'LL", " ", "  "]
    for _ in range(120):
        n = rng.randint(1, 24)
        s = "".join(rng.choice(alphabet) for _ in range(n))
        corpus.append(u(s))
    for _ in range(40):
        n = rng.randint(1, 16)
        corpus.append(bytes(rng.randrange(256) for _ in range(n)))

    # Deduplicate preserving order.
    seen = set()
    uniq = []
    for b in corpus:
        if b not in seen:
            seen.add(b)
            uniq.append(b)
    return uniq


MODES = ((False, False), (False, True), (True, False))  # (add_bos, special)
FIELDS = ("ids", "ids_special", "ids_bos")


def worker(model):
    """Tokenize requests read from stdin ("<hex|-> <add_bos> <special>") and answer one JSON line each.

    Runs in a child process because llama.cpp can abort the whole process (an uncaught C++
    exception -> std::terminate) on some invalid UTF-8 inputs; the parent records that as an
    error and restarts the worker.
    """
    import llama_cpp
    llm = llama_cpp.Llama(model_path=model, vocab_only=True, verbose=False)
    for line in sys.stdin:
        h, a, s = line.split()
        b = b"" if h == "-" else bytes.fromhex(h)
        try:
            res = [int(t) for t in llm.tokenize(b, add_bos=a == "1", special=s == "1")]
        except Exception as e:  # Python-level failure: record, never drop
            res = {"error": "%s: %s" % (type(e).__name__, e)}
        sys.stdout.write(json.dumps(res) + "\n")
        sys.stdout.flush()


class Tokenizer:
    def __init__(self, model):
        self.model = model
        self.proc = None
        self.errfile = None

    def _start(self):
        import subprocess
        import tempfile
        self.errfile = tempfile.TemporaryFile(mode="w+")
        env = dict(os.environ, GGML_NO_BACKTRACE="1")  # no gdb backtrace on abort
        self.proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--worker", self.model],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self.errfile, text=True, env=env)

    def tokenize(self, b, add_bos, special):
        if self.proc is None:
            self._start()
        self.proc.stdin.write("%s %d %d\n" % (b.hex() or "-", add_bos, special))
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if line:
            return json.loads(line)
        # Worker died inside llama.cpp.
        rc = self.proc.wait()
        self.errfile.seek(0)
        lines = [l.strip() for l in self.errfile.read().splitlines() if l.strip()]
        msg = " ".join(lines[-2:]) if lines else ""
        self.proc = None
        return {"error": "llama.cpp aborted the process (exit %d): %s" % (rc, msg)}

    def close(self):
        if self.proc is not None:
            self.proc.stdin.close()
            self.proc.wait()


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--worker":
        worker(sys.argv[2])
        return
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model", nargs="?", default=DEFAULT_MODEL)
    ap.add_argument("-o", "--out", default=DEFAULT_OUT)
    args = ap.parse_args()

    import llama_cpp
    tk = Tokenizer(os.path.abspath(args.model))
    corpus = build_corpus()
    n_err = 0
    err_inputs = 0

    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    tmp = args.out + ".tmp"
    with open(tmp, "w", encoding="ascii") as f:
        for b in corpus:
            rec = {"hex": b.hex()}
            bad = False
            for field, (add_bos, special) in zip(FIELDS, MODES):
                r = tk.tokenize(b, add_bos, special)
                if isinstance(r, dict):
                    n_err += 1
                    bad = True
                    print("tokenize failed on %s (add_bos=%s special=%s): %s"
                          % (b.hex(), add_bos, special, r["error"]), file=sys.stderr)
                rec[field] = r
            err_inputs += bad
            f.write(json.dumps(rec, separators=(",", ":")) + "\n")
    tk.close()
    os.replace(tmp, args.out)
    print("wrote %d inputs to %s; %d inputs / %d calls failed; llama-cpp-python %s"
          % (len(corpus), args.out, err_inputs, n_err, llama_cpp.__version__))


if __name__ == "__main__":
    main()
