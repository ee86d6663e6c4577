// The model a router serves: its chat template, the model's own or the one the operator names.
#include "router/served_model.h"

#include <string>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/temp_path.h"
#include "tests/support/test_paths.h"

namespace baton::router {
namespace {

using ::testing::HasSubstr;

TEST(ServedModelTest, ATemplateTheOperatorNamesMustParse) {
  const std::string broken =
      test_support::WriteTempFile("served_model_test_broken.jinja", "{% for m in %}");
  absl::StatusOr<std::unique_ptr<ServedModel>> served =
      ServedModel::Load(test_support::DefaultModelPath(), 0, broken);
  ASSERT_FALSE(served.ok());
  EXPECT_EQ(served.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(served.status().message(), HasSubstr(broken));
  EXPECT_THAT(served.status().message(), HasSubstr("does not parse"));

  served = ServedModel::Load(test_support::DefaultModelPath(), 0, "/nonexistent/t.jinja");
  EXPECT_EQ(served.status().code(), absl::StatusCode::kNotFound);
}

TEST(ServedModelTest, TheNamedTemplateRendersChats) {
  const std::string file =
      test_support::WriteTempFile("served_model_test.jinja",
                                  "{% for m in messages %}[{{ m.role }}]{{ m.content }}"
                                  "{% endfor %}");
  absl::StatusOr<std::unique_ptr<ServedModel>> served =
      ServedModel::Load(test_support::DefaultModelPath(), 0, file);
  ASSERT_TRUE(served.ok()) << served.status();
  absl::StatusOr<std::string> text =
      (*served)->prompt_encoder().RenderChat(engine::TextChat({{"user", "Hi"}}));
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*text, "[user]Hi");
}

// How tool calls are read: the format the template writes, or the one the operator names.
TEST(ServedModelTest, TheToolCallFormatComesFromTheTemplateOrTheFlag) {
  absl::StatusOr<std::unique_ptr<ServedModel>> served =
      ServedModel::Load(test_support::DefaultModelPath());
  ASSERT_TRUE(served.ok()) << served.status();
  EXPECT_EQ((*served)->tool_call_format(), std::nullopt);  // SmolLM2's template has no tools
  const std::string hermes = test_support::WriteTempFile(
      "served_model_test_tools.jinja",
      "{% for m in messages %}{{ m.content }}{% endfor %}{% if tools %}<tool_call>{% endif %}");
  served = ServedModel::Load(test_support::DefaultModelPath(), 0, hermes);
  ASSERT_TRUE(served.ok()) << served.status();
  EXPECT_EQ((*served)->tool_call_format(), ToolCallFormat::kHermes);
  served = ServedModel::Load(test_support::DefaultModelPath(), 0, hermes, "llama3_json");
  ASSERT_TRUE(served.ok()) << served.status();
  EXPECT_EQ((*served)->tool_call_format(), ToolCallFormat::kLlama3Json);
  served = ServedModel::Load(test_support::DefaultModelPath(), 0, "", "xml");
  ASSERT_FALSE(served.ok());
  EXPECT_THAT(served.status().message(), HasSubstr("--tool-call-parser"));
}

}  // namespace
}  // namespace baton::router
