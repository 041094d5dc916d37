"""Three platforms' wires, spoken by a local server in place of theirs: Amazon Bedrock (SigV4-signed
`/model/ID/invoke` and `/invoke-with-response-stream` answering in AWS event-stream frames), Google Vertex AI
(`...:rawPredict` and `...:streamRawPredict`, server-sent events) and an OpenAI-compatible server
(`/v1/chat/completions`, JSON or server-sent events ending in `[DONE]`).

Each `Wire` says where its client posts, what a success, a cut answer, a stream (whole or cut off), a
refusal and server trouble inside a stream look like on it, and builds its backend against the server."""

from __future__ import annotations

import base64
import functools
import json
import urllib.parse
import zlib
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any, Callable

from messages_api import USAGE, error_json, message_json, sse, stream_events
from pytest_httpserver import HTTPServer
from werkzeug import Request, Response

from orchestrator.llm.bedrock import BedrockLLM
from orchestrator.llm.openai_chat import OpenAIChatLLM
from orchestrator.llm.vertex import VertexLLM

AWS_KEY, AWS_SECRET, AWS_REGION = "AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", "us-east-1"
BEDROCK_MODEL = "us.anthropic.claude-sonnet-4-5-20250929-v1:0"
VERTEX_MODEL, VERTEX_PROJECT, VERTEX_REGION = "claude-sonnet-4-5@20250929", "grpo-lab", "us-east5"
SERVICE_ACCOUNT = "runner@grpo-lab.iam.gserviceaccount.com"
OPENAI_MODEL = "Qwen/Qwen2.5-Coder-7B-Instruct"
OPENAI_USAGE = {"prompt_tokens": 7120, "completion_tokens": 30, "total_tokens": 7150,
                "prompt_tokens_details": {"cached_tokens": 7000}}


def aws_environment(monkeypatch) -> None:
    """Fake AWS credentials in the environment, and nothing else of AWS's: no files, no instance metadata."""
    for name in ("AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_SESSION_TOKEN", "AWS_BEARER_TOKEN_BEDROCK",
                 "AWS_DEFAULT_REGION", "ANTHROPIC_BEDROCK_BASE_URL", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
                 "AWS_CONTAINER_CREDENTIALS_FULL_URI", "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_ROLE_ARN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", AWS_KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", AWS_SECRET)
    monkeypatch.setenv("AWS_REGION", AWS_REGION)
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent/aws-config")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent/aws-credentials")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


def google_environment(monkeypatch, folder: Path, token_uri: str, base_url: str) -> None:
    """Application Default Credentials of a service account (a key file in `folder`) whose token endpoint is
    `token_uri`; Vertex's region, project and endpoint."""
    key = folder / "key.json"
    key.write_text(json.dumps({"type": "service_account", "client_email": SERVICE_ACCOUNT, "private_key_id": "k1",
                               "private_key": _service_account_key(), "token_uri": token_uri}))
    for variable, value in (("GOOGLE_APPLICATION_CREDENTIALS", str(key)), ("CLOUDSDK_CONFIG", str(folder / "gcloud")),
                            ("CLOUD_ML_REGION", VERTEX_REGION), ("ANTHROPIC_VERTEX_PROJECT_ID", VERTEX_PROJECT),
                            ("ANTHROPIC_VERTEX_BASE_URL", base_url)):
        monkeypatch.setenv(variable, value)


@functools.lru_cache(maxsize=1)
def _service_account_key() -> str:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption()).decode()


# --------------------------------------------------------------------------- AWS event-stream and SigV4


def event_frame(headers: dict[str, str], payload: bytes) -> bytes:
    """One AWS event-stream message: prelude (lengths, CRC), string headers, payload, message CRC."""
    encoded = b"".join(len(name).to_bytes(1, "big") + name.encode() + b"\x07" + len(value.encode()).to_bytes(2, "big")
                       + value.encode() for name, value in headers.items())
    prelude = (12 + len(encoded) + len(payload) + 4).to_bytes(4, "big") + len(encoded).to_bytes(4, "big")
    message = prelude + zlib.crc32(prelude).to_bytes(4, "big") + encoded + payload
    return message + zlib.crc32(message).to_bytes(4, "big")


def chunk_frame(event: dict) -> bytes:
    payload = json.dumps({"bytes": base64.b64encode(json.dumps(event).encode()).decode()}).encode()
    return event_frame({":event-type": "chunk", ":content-type": "application/json", ":message-type": "event"}, payload)


def exception_frame(kind: str, message: str) -> bytes:
    return event_frame({":exception-type": kind, ":content-type": "application/json", ":message-type": "exception"},
                       json.dumps({"message": message}).encode())


def sigv4_signature_matches(request: Request, secret: str = AWS_SECRET) -> bool:
    """Whether the request's SigV4 signature is the one `secret` gives for what arrived (method, raw path, the
    signed headers, the body)."""
    from botocore.auth import SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    scheme, _, fields = request.headers["Authorization"].partition(" ")
    parts = dict(field.strip().split("=", 1) for field in fields.split(","))
    signed = parts["SignedHeaders"].split(";")
    url = f"http://{request.host}{request.environ.get('RAW_URI') or request.full_path}"
    aws = AWSRequest(method=request.method, url=url, headers={name: request.headers[name] for name in signed},
                     data=request.get_data())
    aws.context["timestamp"] = request.headers["X-Amz-Date"]
    signer = SigV4Auth(Credentials(AWS_KEY, secret), "bedrock", AWS_REGION)
    expected = signer.signature(signer.string_to_sign(aws, signer.canonical_request(aws)), aws)
    return (scheme == "AWS4-HMAC-SHA256" and parts["Credential"].startswith(f"{AWS_KEY}/")
            and expected == parts["Signature"])


# --------------------------------------------------------------------------- the wires


class Wire(ABC):
    name = ""

    @abstractmethod
    def path(self, stream: bool) -> str: ...

    @abstractmethod
    def build(self, httpserver: HTTPServer, **kwargs: Any) -> Any: ...

    @abstractmethod
    def success(self, text: str, cut: bool = False) -> Response: ...

    @abstractmethod
    def stream(self, chunks: list[str], *, complete: bool = True, cut: bool = False) -> Response: ...

    @abstractmethod
    def stream_trouble(self) -> Response:
        """A 200 stream that starts, then reports server trouble."""

    @abstractmethod
    def refusal(self, status: int, message: str) -> Response: ...

    @abstractmethod
    def text_of(self, body: dict) -> str:
        """Everything a request sent as text, in the order sent."""

    def streamed(self, request: Request) -> bool:
        """Whether the client asked for a stream (its path says so, or its body)."""
        return request.path == self.path(True) != self.path(False) or bool(json.loads(request.data).get("stream"))


class _ClaudeWire(Wire):
    """Bedrock and Vertex answer in the Messages API's own JSON and events."""

    def success(self, text: str, cut: bool = False) -> Response:
        body = {**message_json(text, USAGE), "stop_reason": "max_tokens" if cut else "end_turn"}
        return Response(json.dumps(body), content_type="application/json", headers=self.id_header("req_1"))

    def events(self, chunks: list[str], complete: bool, cut: bool) -> list[dict]:
        events = stream_events(chunks)
        if cut:
            events[-2] = {**events[-2], "delta": {"stop_reason": "max_tokens", "stop_sequence": None}}
        return events if complete else events[:3]

    def text_of(self, body: dict) -> str:
        system = body.get("system") or []
        parts = [block["text"] for block in system]
        for message in body["messages"]:
            content = message["content"]
            parts += [content] if isinstance(content, str) else [block["text"] for block in content]
        return "\n".join(parts)

    def id_header(self, value: str) -> dict[str, str]:
        return {"request-id": value}


class BedrockWire(_ClaudeWire):
    name = "bedrock"

    def path(self, stream: bool) -> str:
        return f"/model/{urllib.parse.quote(BEDROCK_MODEL, safe=':')}/" + \
            ("invoke-with-response-stream" if stream else "invoke")

    def build(self, httpserver: HTTPServer, **kwargs: Any) -> BedrockLLM:
        return BedrockLLM(BEDROCK_MODEL, base_url=httpserver.url_for(""), **kwargs)

    def id_header(self, value: str) -> dict[str, str]:
        return {"x-amzn-RequestId": value}

    def stream(self, chunks: list[str], *, complete: bool = True, cut: bool = False) -> Response:
        frames = b"".join(chunk_frame(event) for event in self.events(chunks, complete, cut))
        return Response(frames, content_type="application/vnd.amazon.eventstream", headers=self.id_header("req_s"))

    def stream_trouble(self) -> Response:
        frames = chunk_frame(stream_events([])[0]) + exception_frame("throttlingException", "Too many tokens")
        return Response(frames, content_type="application/vnd.amazon.eventstream")

    def refusal(self, status: int, message: str) -> Response:
        kind = {400: "ValidationException", 403: "AccessDeniedException", 404: "ResourceNotFoundException",
                429: "ThrottlingException", 500: "InternalServerException",
                503: "ServiceUnavailableException"}[status]
        return Response(json.dumps({"message": message}), status=status, content_type="application/json",
                        headers={"x-amzn-ErrorType": f"{kind}:http://internal.amazon.com/coral/com.amazon.bedrock/"})

class VertexWire(_ClaudeWire):
    name = "vertex"

    def path(self, stream: bool) -> str:
        return (f"/projects/{VERTEX_PROJECT}/locations/{VERTEX_REGION}/publishers/anthropic/models/"
                f"{VERTEX_MODEL}:{'streamRawPredict' if stream else 'rawPredict'}")

    def build(self, httpserver: HTTPServer, **kwargs: Any) -> VertexLLM:
        return VertexLLM(VERTEX_MODEL, region=VERTEX_REGION, project_id=VERTEX_PROJECT, access_token="ya29.test",
                         base_url=httpserver.url_for(""), **kwargs)

    def stream(self, chunks: list[str], *, complete: bool = True, cut: bool = False) -> Response:
        return Response(sse(*self.events(chunks, complete, cut)), content_type="text/event-stream",
                        headers=self.id_header("req_s"))

    def stream_trouble(self) -> Response:
        return Response(sse(stream_events([])[0], error_json("overloaded_error", "Overloaded")),
                        content_type="text/event-stream")

    def refusal(self, status: int, message: str) -> Response:
        kind = {400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED", 404: "NOT_FOUND",
                429: "RESOURCE_EXHAUSTED", 500: "INTERNAL", 503: "UNAVAILABLE"}[status]
        return Response(json.dumps([{"error": {"code": status, "message": message, "status": kind}}]), status=status,
                        content_type="application/json")


class OpenAIWire(Wire):
    name = "openai"

    def path(self, stream: bool) -> str:
        return "/v1/chat/completions"

    def build(self, httpserver: HTTPServer, **kwargs: Any) -> OpenAIChatLLM:
        return OpenAIChatLLM(OPENAI_MODEL, base_url=httpserver.url_for("/v1"), api_key="test-key", **kwargs)

    def success(self, text: str, cut: bool = False) -> Response:
        body = {"id": "chatcmpl-1", "object": "chat.completion", "created": 0, "model": OPENAI_MODEL,
                "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                             "finish_reason": "length" if cut else "stop"}],
                "usage": OPENAI_USAGE}
        return Response(json.dumps(body), content_type="application/json", headers={"x-request-id": "req_1"})

    def chunk(self, delta: dict, finish: str | None = None, usage: dict | None = None) -> dict:
        choices = [{"index": 0, "delta": delta, "finish_reason": finish}] if usage is None else []
        return {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 0, "model": OPENAI_MODEL,
                "choices": choices, "usage": usage}

    def stream(self, chunks: list[str], *, complete: bool = True, cut: bool = False) -> Response:
        events = [self.chunk({"role": "assistant", "content": ""})]
        events += [self.chunk({"content": chunk}) for chunk in chunks]
        if complete:
            events += [self.chunk({}, "length" if cut else "stop"), self.chunk({}, usage=OPENAI_USAGE)]
        data = "".join(f"data: {json.dumps(event)}\n\n" for event in events) + ("data: [DONE]\n\n" if complete else "")
        return Response(data, content_type="text/event-stream", headers={"x-request-id": "req_s"})

    def stream_trouble(self) -> Response:
        trouble = {"error": {"message": "engine overloaded", "type": "server_error", "code": 503}}
        data = (f"data: {json.dumps(self.chunk({'role': 'assistant', 'content': 'par'}))}\n\n"
                f"data: {json.dumps(trouble)}\n\n")
        return Response(data, content_type="text/event-stream")

    def refusal(self, status: int, message: str) -> Response:
        kind = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
                404: "not_found_error", 429: "rate_limit_error", 500: "server_error", 503: "server_error"}[status]
        return Response(json.dumps({"error": {"message": message, "type": kind, "code": status}}), status=status,
                        content_type="application/json")

    def text_of(self, body: dict) -> str:
        return "\n".join(message["content"] for message in body["messages"])


WIRES = {wire.name: wire for wire in (BedrockWire(), VertexWire(), OpenAIWire())}


class ScriptedPlatform:
    """A platform's server whose model answers `respond(request_text, body)`, streamed where asked, on the
    platform's paths; every request body is recorded."""

    def __init__(self, httpserver: HTTPServer, wire: Wire, respond: Callable[[str, dict], str]) -> None:
        self.requests: list[dict] = []

        def handle(request: Request) -> Response:
            body = json.loads(request.data)
            self.requests.append(body)
            text = respond(wire.text_of(body), body)
            return wire.stream([text]) if wire.streamed(request) else wire.success(text)

        for path in {wire.path(False), wire.path(True)}:
            httpserver.expect_request(path, method="POST").respond_with_handler(handle)
