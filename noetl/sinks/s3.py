"""The s3 sink: the value as one object (json, jsonl or csv, like the file sink).

`put_object` replaces an object whole, so a re-run writes the same object again rather than
a second one. The client takes `region` and `endpoint_url` (MinIO, LocalStack, moto) from
the spec, and keys from the credential named by `spec.credential` (an untyped map, or a
record of type s3 or aws: `aws_access_key_id`, `aws_secret_access_key`, optional
`aws_session_token`), else from
boto3's usual chain (environment, profile, instance role). botocore's own retries are off:
the sink's retry policy is the only one.
"""

from __future__ import annotations

import io
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

import boto3  # type: ignore[import-untyped]
from botocore.config import Config  # type: ignore[import-untyped]
from botocore.exceptions import (  # type: ignore[import-untyped]
    BotoCoreError,
    ClientError,
    ConnectionClosedError,
    ConnectTimeoutError,
    EndpointConnectionError,
    NoCredentialsError,
    ReadTimeoutError,
)

from noetl.credentials.records import s3_keys
from noetl.credentials.scope import current_scope
from noetl.dsl.kinds import S3Sink
from noetl.errors import RetryableError, SinkError
from noetl.sinks._data import CONTENT_TYPES, write_body

_TRANSIENT_CODES = frozenset(
    {"SlowDown", "Throttling", "ThrottlingException", "RequestTimeout", "InternalError"}
)
_CONFIG = Config(
    connect_timeout=10,
    read_timeout=60,
    retries={"total_max_attempts": 1, "mode": "standard"},
)


class S3Writer:
    kind = "s3"

    def write(self, value: Any, spec: Mapping[str, Any], key: str) -> dict[str, Any]:
        config = S3Sink.model_validate(dict(spec))
        buffer = io.StringIO()
        count = write_body(buffer, value, config.format, "s3")
        body = buffer.getvalue().encode("utf-8")
        client = _client(config)
        target = f"s3://{config.bucket}/{config.key}"
        try:
            client.put_object(
                Bucket=config.bucket,
                Key=config.key,
                Body=body,
                ContentType=CONTENT_TYPES[config.format],
                # Metadata values must be ASCII: the key may hold a loop key.
                Metadata={"noetl-sink-key": quote(key, safe=":")},
            )
        except ClientError as exc:
            raise _client_error(exc, target) from None
        except (
            EndpointConnectionError,
            ConnectTimeoutError,
            ReadTimeoutError,
            ConnectionClosedError,
        ) as exc:
            raise RetryableError(f"{target}: {exc}") from None
        except NoCredentialsError:
            raise SinkError(
                f"{target}: no AWS credentials (name one with spec.credential, or configure "
                "boto3's environment or profile)"
            ) from None
        except BotoCoreError as exc:
            raise SinkError(f"{target}: {exc}") from None
        return {
            "bucket": config.bucket,
            "object": config.key,
            "format": config.format,
            "rows": count,
            "bytes": len(body),
        }


def _client(config: S3Sink) -> Any:
    keys: dict[str, str] = {}
    if config.credential:
        keys = s3_keys(current_scope().record(config.credential))
    # A session per write: boto3's default session is not safe to share between threads.
    session = boto3.session.Session(**keys)
    return session.client(
        "s3", region_name=config.region, endpoint_url=config.endpoint_url, config=_CONFIG
    )


def _client_error(exc: ClientError, target: str) -> Exception:
    error = exc.response.get("Error", {})
    code = str(error.get("Code", ""))
    status = int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
    text = f"{target}: {code or 'error'} ({status}): {error.get('Message', '')}".rstrip(": ")
    if status in (408, 429) or status >= 500 or code in _TRANSIENT_CODES:
        return RetryableError(text)
    return SinkError(text)
