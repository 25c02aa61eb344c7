"""The agent APIs, as readers into the chat request and writers of their own answers.

Every API an agent client speaks is one translation, written once here and used by every
server: a reader that turns its request into the OpenAI chat request toolbridge plans from
(`chat_request`), and writers that turn the chat answer, whole or as stream chunks, into that
API's answer and events. No API has its own tool-calling path.

- `responses`, `responses_stream`: OpenAI Responses (`POST /v1/responses`: function_call items).
- `anthropic`: Anthropic Messages (`POST /v1/messages`: tool_use / tool_result blocks).
"""
