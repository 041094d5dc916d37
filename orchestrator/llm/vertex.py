"""Claude on Google Vertex AI: `--llm vertex:MODEL`, through the anthropic SDK's AnthropicVertex client
(`pip install 'grpo-orchestrator[vertex]'`).

The SDK sends the Messages body to
`/projects/PROJECT/locations/REGION/publishers/anthropic/models/MODEL:rawPredict` (`:streamRawPredict` when
streamed, as server-sent events) with a Google access token. The region is CLOUD_ML_REGION (`us-east5`,
`europe-west1`, `global`, ...), the project ANTHROPIC_VERTEX_PROJECT_ID, else the credentials' own; the
token comes from Application Default Credentials (`gcloud auth application-default login`, or
GOOGLE_APPLICATION_CREDENTIALS naming a key file), refreshed by google-auth. ANTHROPIC_VERTEX_BASE_URL
replaces the endpoint. MODEL is a Claude model id as Vertex spells it, e.g. `claude-sonnet-4-5@20250929`.
"""

from __future__ import annotations

import os
from typing import Any

from orchestrator.llm.base import LLMError, one_line
from orchestrator.llm.messages import MessagesLLM
from orchestrator.llm.prices import VERTEX_MODEL_ID, PriceTable

_EXTRA = "pip install 'grpo-orchestrator[vertex]' (google-auth)"
_LOGIN = "run `gcloud auth application-default login`, or export GOOGLE_APPLICATION_CREDENTIALS=KEY.json"
_SCOPE = "https://www.googleapis.com/auth/cloud-platform"


class VertexLLM(MessagesLLM):
    backend = "vertex"
    platform = "Vertex AI"

    def __init__(self, model: str, *, region: str | None = None, project_id: str | None = None,
                 access_token: str | None = None, base_url: str | None = None, timeout_s: float = 600.0,
                 prices: PriceTable | None = None, **retry: Any) -> None:
        if not VERTEX_MODEL_ID.fullmatch(model):
            raise LLMError(f"vertex: {model!r} is not a Claude model id on Vertex AI: use one like "
                           "claude-sonnet-4-5@20250929")
        self.region = region or os.environ.get("CLOUD_ML_REGION")
        if not self.region:
            raise LLMError("vertex: no region: export CLOUD_ML_REGION=us-east5 (a region that serves the model, "
                           "or global)")
        project = project_id or os.environ.get("ANTHROPIC_VERTEX_PROJECT_ID")
        try:
            import google.auth
            import google.auth.exceptions
            from anthropic import AnthropicVertex
        except ImportError as err:
            raise LLMError(f"vertex: {err.name or err} is not installed: {_EXTRA}") from err
        self._credentials: Any = None
        if access_token is None:
            try:
                self._credentials, found = google.auth.default(scopes=[_SCOPE])
            except google.auth.exceptions.DefaultCredentialsError as err:
                raise LLMError(f"vertex: no Google credentials ({one_line(str(err))}): {_LOGIN}") from err
            project = project or found
        if not project:
            raise LLMError("vertex: no Google Cloud project: export ANTHROPIC_VERTEX_PROJECT_ID=PROJECT")
        self.project = project
        client = AnthropicVertex(region=self.region, project_id=project, access_token=access_token,
                                 credentials=self._credentials, base_url=base_url, max_retries=0, timeout=timeout_s)
        super().__init__(model, client, prices=prices, **retry)

    @property
    def label(self) -> str:
        return f"vertex {self.model} in {self.region}, project {self.project}"

    def preflight(self) -> None:
        """The endpoint answers, and Application Default Credentials give a token (an access token given
        outright is the caller's to vouch for)."""
        super().preflight()
        if self._credentials is None:
            return
        import google.auth.exceptions
        import google.auth.transport.requests
        try:
            self._credentials.refresh(google.auth.transport.requests.Request())
        except google.auth.exceptions.GoogleAuthError as err:
            raise LLMError(f"vertex: the Google credentials give no access token ({one_line(str(err))}): "
                           f"{_LOGIN}") from err

    def _unreachable_hint(self) -> str:
        return (f"check CLOUD_ML_REGION ({self.region!r}), the network, or ANTHROPIC_VERTEX_BASE_URL where it is "
                "set")

    def _hints(self) -> dict[int, str]:
        return {401: f"the access token was refused: {_LOGIN}",
                403: f"check that project {self.project!r} may use {self.model!r} (enable it in the Model Garden) "
                     f"and that your account may call Vertex AI there",
                404: f"check the model id {self.model!r}: is it served in {self.region} (CLOUD_ML_REGION)?"}

