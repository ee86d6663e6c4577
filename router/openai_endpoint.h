// The two OpenAI endpoints the router's HTTP API serves: POST /v1/completions and
// POST /v1/chat/completions.
#ifndef BATON_ROUTER_OPENAI_ENDPOINT_H_
#define BATON_ROUTER_OPENAI_ENDPOINT_H_

namespace baton::router {

enum class OpenAiEndpoint { kCompletions, kChatCompletions };

}  // namespace baton::router

#endif  // BATON_ROUTER_OPENAI_ENDPOINT_H_
