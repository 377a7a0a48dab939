"""Images for vision models: decoded, downscaled and encoded as a data URL with Pillow.

The only module that imports PIL, and only when an image arrives. Blocking: callers run it in a
thread.
"""

from __future__ import annotations

import base64
import io
from pathlib import Path

# Formats every vision endpoint accepts as is; anything else (BMP, TIFF, HEIC) becomes JPEG.
_PASSED = {"JPEG": "image/jpeg", "PNG": "image/png", "WEBP": "image/webp", "GIF": "image/gif"}


class ImageReadError(ValueError):
    """The file is not an image Pillow can decode."""


def image_data_url(path: Path, max_side: int) -> tuple[str, tuple[int, int]]:
    """A `data:` URL of the image, its longer side at most `max_side`; and its size in pixels.

    An image already small enough in a passed format goes byte for byte; anything else is
    re-encoded (PNG keeps transparency, the rest becomes JPEG).
    """
    from PIL import Image, ImageOps, UnidentifiedImageError

    try:
        with Image.open(path) as opened:
            source_format = opened.format or ""
            if max(opened.size) <= max_side and source_format in _PASSED:
                data = path.read_bytes()
                return _url(_PASSED[source_format], data), opened.size
            # A JPEG can be decoded at 1/2, 1/4 or 1/8 scale directly: far less work for a phone
            # photo than decoding every pixel and throwing most away.
            scale = max_side / max(opened.size)
            opened.draft("RGB", (round(opened.width * scale), round(opened.height * scale)))
            # Phones store the camera's orientation apart from the pixels; apply it first.
            image = ImageOps.exif_transpose(opened)
            image.thumbnail((max_side, max_side), Image.Resampling.LANCZOS)
            buffer = io.BytesIO()
            if source_format == "PNG" or image.mode in ("RGBA", "LA", "P"):
                image.save(buffer, format="PNG", optimize=True)
                mime = "image/png"
            else:
                image.convert("RGB").save(buffer, format="JPEG", quality=85)
                mime = "image/jpeg"
            return _url(mime, buffer.getvalue()), image.size
    except (UnidentifiedImageError, OSError, Image.DecompressionBombError) as exc:
        raise ImageReadError(str(exc)) from exc


def _url(mime: str, data: bytes) -> str:
    return f"data:{mime};base64,{base64.b64encode(data).decode('ascii')}"
