// Where a chat template comes from: the model's own, a built-in name, or a file.
#include "engine/chat_template_source.h"

#include <string>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/temp_path.h"

namespace baton::engine {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

TEST(ChatTemplateSourceTest, TheModelsOwnUnlessOneIsNamed) {
  EXPECT_EQ(*ChatTemplateSource("", "{{ x }}"), "{{ x }}");
  absl::StatusOr<std::string> none = ChatTemplateSource("", "");
  EXPECT_EQ(none.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(none.status().message(), HasSubstr("--chat-template NAME|FILE"));
  EXPECT_THAT(none.status().message(), HasSubstr("chatml, llama3, gemma"));
}

TEST(ChatTemplateSourceTest, BuiltInNames) {
  EXPECT_THAT(*ChatTemplateSource("chatml", "{{ x }}"), HasSubstr("<|im_start|>"));
  EXPECT_THAT(*ChatTemplateSource("llama3", ""), HasSubstr("<|start_header_id|>"));
  EXPECT_THAT(*ChatTemplateSource("gemma", ""), StartsWith("{{ bos_token }}"));
}

TEST(ChatTemplateSourceTest, AFileNamedIsRead) {
  const std::string path =
      test_support::WriteTempFile("chat_template_source_test.jinja", "{{ messages }}\n");
  EXPECT_EQ(*ChatTemplateSource(path, "{{ x }}"), "{{ messages }}\n");
}

TEST(ChatTemplateSourceTest, BadFilesAreNamed) {
  absl::StatusOr<std::string> missing = ChatTemplateSource("/nonexistent/t.jinja", "");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(missing.status().message(), HasSubstr("/nonexistent/t.jinja"));
  EXPECT_THAT(missing.status().message(), HasSubstr("built-in"));

  const std::string empty = test_support::WriteTempFile("chat_template_source_empty.jinja", "");
  EXPECT_THAT(ChatTemplateSource(empty, "").status().message(), HasSubstr("is empty"));
  const std::string binary =
      test_support::WriteTempFile("chat_template_source_binary.jinja", "\xff\xfe{{ x }}");
  EXPECT_THAT(ChatTemplateSource(binary, "").status().message(), HasSubstr("not valid UTF-8"));
}

}  // namespace
}  // namespace baton::engine
