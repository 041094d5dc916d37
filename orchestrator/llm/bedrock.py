"""Claude on Amazon Bedrock: `--llm bedrock:MODEL`, through the anthropic SDK's AnthropicBedrock client
(`pip install 'grpo-orchestrator[bedrock]'`).

The SDK sends the Messages body to `/model/MODEL/invoke` (`/invoke-with-response-stream` when streamed, as
AWS event-stream frames), signed with SigV4. Credentials are AWS's usual ones: AWS_BEARER_TOKEN_BEDROCK (a
Bedrock API key), or whatever boto3 finds (AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, AWS_PROFILE, the
shared files, an instance role). The region is AWS_REGION, else AWS_DEFAULT_REGION, else the profile's.
ANTHROPIC_BEDROCK_BASE_URL replaces the endpoint (a VPC endpoint or a gateway). MODEL is a Claude model id
(`anthropic.claude-sonnet-4-5-20250929-v1:0`), an inference profile (`us.anthropic.claude-...`) or an ARN.
"""

from __future__ import annotations

import os
from typing import Any

from orchestrator.llm.base import LLMError
from orchestrator.llm.messages import MessagesLLM
from orchestrator.llm.prices import BEDROCK_MODEL_ID, PriceTable

_EXTRA = "pip install 'grpo-orchestrator[bedrock]' (boto3 and botocore)"
_CREDENTIALS = ("export AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, set AWS_PROFILE, "
                "or export AWS_BEARER_TOKEN_BEDROCK (a Bedrock API key)")


class BedrockLLM(MessagesLLM):
    backend = "bedrock"
    platform = "Amazon Bedrock"

    def __init__(self, model: str, *, region: str | None = None, base_url: str | None = None,
                 timeout_s: float = 600.0, prices: PriceTable | None = None, **retry: Any) -> None:
        if not (BEDROCK_MODEL_ID.fullmatch(model) or model.startswith("arn:")):
            raise LLMError(f"bedrock: {model!r} is not a Claude model id on Bedrock: use one like "
                           "anthropic.claude-sonnet-4-5-20250929-v1:0, an inference profile like "
                           "us.anthropic.claude-sonnet-4-5-20250929-v1:0, or an inference profile's ARN")
        try:
            import boto3
            import botocore.exceptions
            from anthropic import AnthropicBedrock
        except ImportError as err:
            raise LLMError(f"bedrock: {err.name or err} is not installed: {_EXTRA}") from err
        try:
            session = boto3.Session()
        except botocore.exceptions.ProfileNotFound as err:
            raise LLMError(f"bedrock: {err}: set AWS_PROFILE to a profile of ~/.aws/config, or unset it") from err
        self.region = region or os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") \
            or session.region_name
        if not self.region:
            raise LLMError("bedrock: no AWS region: export AWS_REGION=us-east-1 (a region where your account "
                           "may use the model), or set one in your AWS profile")
        if not os.environ.get("AWS_BEARER_TOKEN_BEDROCK") and session.get_credentials() is None:
            raise LLMError(f"bedrock: no AWS credentials: {_CREDENTIALS}")
        client = AnthropicBedrock(aws_region=self.region, base_url=base_url, max_retries=0, timeout=timeout_s)
        super().__init__(model, client, prices=prices, **retry)

    @property
    def label(self) -> str:
        return f"bedrock {self.model} in {self.region}"

    def _unreachable_hint(self) -> str:
        return f"check AWS_REGION ({self.region!r}), the network, or ANTHROPIC_BEDROCK_BASE_URL where it is set"

    def _hints(self) -> dict[int, str]:
        access = f"check the AWS credentials ({_CREDENTIALS}) and that they may invoke {self.model!r} in {self.region}"
        return {401: access, 403: access,
                404: f"check the model id {self.model!r}: is it offered in {self.region} (AWS_REGION)?"}
