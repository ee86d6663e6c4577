// NFC normalization: composition, Hangul, singletons, canonical ordering, exclusions, and text
// that must come back unchanged. (The Qwen corpora of tokenizer_json_test check it further,
// through Hugging Face's ids.)
#include "engine/unicode_nfc.h"

#include "gtest/gtest.h"

namespace baton::engine::unicode {
namespace {

TEST(NfcTest, ComposesDecomposedLetters) {
  EXPECT_EQ(ToNfc("e\xCC\x81t\xC3\xA9"), "\xC3\xA9t\xC3\xA9");    // e + U+0301
  EXPECT_EQ(ToNfc("A\xCC\x8A\xCC\xA3"), "\xE1\xBA\xA0\xCC\x8A");  // A ring dot -> Ạ + ring
}

TEST(NfcTest, Hangul) {
  // U+1100 U+1161 U+11A8 -> U+AC01; a syllable stays.
  EXPECT_EQ(ToNfc("\xE1\x84\x80\xE1\x85\xA1\xE1\x86\xA8"), "\xEA\xB0\x81");
  EXPECT_EQ(ToNfc("\xEA\xB0\x81"), "\xEA\xB0\x81");
  // LV syllable + T -> LVT.
  EXPECT_EQ(ToNfc("\xEA\xB0\x80\xE1\x86\xA8"), "\xEA\xB0\x81");
}

TEST(NfcTest, SingletonsAndExclusions) {
  EXPECT_EQ(ToNfc("\xE2\x84\xAB"), "\xC3\x85");                  // Angstrom sign -> Å
  EXPECT_EQ(ToNfc("\xE2\x84\xA6"), "\xCE\xA9");                  // Ohm sign -> Omega
  EXPECT_EQ(ToNfc("\xE0\xA5\x98"), "\xE0\xA4\x95\xE0\xA4\xBC");  // U+0958 stays decomposed
}

TEST(NfcTest, OrdersCombiningMarks) {
  // q + U+0307 (230) + U+0323 (220) -> q + U+0323 + U+0307.
  EXPECT_EQ(ToNfc("q\xCC\x87\xCC\xA3"), "q\xCC\xA3\xCC\x87");
}

TEST(NfcTest, LeavesNormalizedTextAlone) {
  for (const char* text : {"", "plain ASCII", "caf\xC3\xA9", "\xE4\xB8\xAD\xE6\x96\x87",
                           "\xF0\x9F\x98\x80 emoji", "\xCC\x81 leading mark"}) {
    EXPECT_EQ(ToNfc(text), text) << text;
  }
}

}  // namespace
}  // namespace baton::engine::unicode
