"""The endpoints beside the chat model, through the openai SDK: embeddings for memory search and
speech to text for voice notes. Their errors become memory's `EmbeddingError` (which the search
catches, falling back to keywords) and `TranscriptionError`.
"""

from __future__ import annotations

import asyncio

import openai

from gateway.bus import scrub
from gateway.errors import TranscriptionError
from gateway.llm.provider import secrets_of, status_text
from gateway.llm.types import endpoint_of
from gateway.logs import redact
from memory.errors import EmbeddingError


class OpenAIEmbedder:
    """memory's `Embedder` through the openai SDK against any OpenAI-compatible embeddings endpoint."""

    def __init__(self, *, base_url: str, api_key: str, model: str, timeout: float = 30) -> None:
        self.model = model
        self._timeout = timeout
        # No retries: a failed call costs one query its vectors, not the search; the next one retries.
        self._client = openai.AsyncOpenAI(
            base_url=base_url, api_key=api_key or "not-needed", timeout=timeout, max_retries=0
        )

    async def embed(self, texts: list[str]) -> list[list[float]]:
        try:
            async with asyncio.timeout(self._timeout):
                # "float" explicitly: the SDK's default (base64) is not served by every server.
                answer = await self._client.embeddings.create(
                    model=self.model, input=texts, encoding_format="float"
                )
        except TimeoutError as exc:
            raise EmbeddingError(f"no answer within {self._timeout:.0f}s") from exc
        except openai.APIStatusError as exc:
            raise EmbeddingError(status_text(exc)) from exc
        except (openai.OpenAIError, ValueError) as exc:  # connection errors, unparseable answers
            raise EmbeddingError(f"{type(exc).__name__}: {exc}") from exc
        ordered = sorted(answer.data, key=lambda item: item.index)
        return [list(item.embedding) for item in ordered]

    async def close(self) -> None:
        await self._client.close()


class OpenAITranscriber:
    """Speech to text through the openai SDK against any OpenAI-compatible transcriptions endpoint."""

    def __init__(self, *, base_url: str, api_key: str, model: str, timeout: float = 120) -> None:
        self.model = model
        self.endpoint = endpoint_of(base_url)
        self._secrets = secrets_of(api_key)  # providers echo (part of) a refused key
        self._timeout = timeout
        # No retries: a voice note that failed is kept and named; the person can send it again.
        self._client = openai.AsyncOpenAI(
            base_url=base_url, api_key=api_key or "not-needed", timeout=timeout, max_retries=0
        )

    async def transcribe(self, filename: str, data: bytes) -> str:
        """The text spoken in one audio file (the SDK sends it as multipart, as OpenAI expects)."""
        try:
            async with asyncio.timeout(self._timeout + 5):
                answer = await self._client.audio.transcriptions.create(
                    model=self.model, file=(filename, data)
                )
        except TimeoutError as exc:
            raise TranscriptionError(f"no answer within {self._timeout:.0f}s") from exc
        except openai.APIConnectionError as exc:
            raise TranscriptionError(f"could not reach {self.endpoint}") from exc
        except openai.APIStatusError as exc:
            raise TranscriptionError(redact(status_text(exc), self._secrets)) from exc
        except (openai.OpenAIError, ValueError) as exc:
            raise TranscriptionError(f"unusable answer: {type(exc).__name__}") from exc
        return scrub(answer.text or "").strip()

    async def close(self) -> None:
        await self._client.close()
