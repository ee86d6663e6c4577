// Reads a Hugging Face tokenizer (tokenizer.json, with tokenizer_config.json and
// chat_template.jinja beside it when present) into a Vocab whose `preparation` holds its
// normalizer and pre-tokenizer, so that Tokenizer gives the ids Hugging Face's `tokenizers` gives.
//
// Supported: a BPE model (vocab, merges as "a b" strings or [a, b] pairs, byte_fallback,
// ignore_merges, fuse_unk, unk_token); normalizers NFC, Replace (string pattern), Prepend and
// Sequence; pre-tokenizers Split (string or regex pattern; Isolated, MergedWithPrevious or
// MergedWithNext; not inverted), ByteLevel (no prefix space), Digits and Sequence; added tokens
// (special ones are control tokens, recognized in text only with parse_special; the others always),
// whose content is matched in the text as given (before normalization); a TemplateProcessing
// post-processor adding a BOS before and/or an EOS after the text. Anything else is an
// INVALID_ARGUMENT naming the file and the field, never a silent approximation.
//
// From tokenizer_config.json: bos_token, eos_token, pad_token (text or {"content": text}) and
// chat_template (text, or the "default" of a list of named templates); chat_template.jinja, when
// present, is the template instead.
//
// Thread-safety: a pure function of the files.
#ifndef BATON_ENGINE_TOKENIZER_JSON_H_
#define BATON_ENGINE_TOKENIZER_JSON_H_

#include <string>

#include "absl/status/statusor.h"
#include "engine/vocab.h"

namespace baton::engine {

// `path` is a tokenizer.json file or a directory holding one.
absl::StatusOr<Vocab> LoadTokenizerJson(const std::string& path);

// Whether `path` names a Hugging Face tokenizer (a directory, or a file ending in .json) rather
// than a GGUF file.
bool IsTokenizerJsonPath(const std::string& path);

}  // namespace baton::engine

#endif  // BATON_ENGINE_TOKENIZER_JSON_H_
