"""How a step's requests to one provider are cut into provider batches: by count and by size.

A provider takes a bounded batch (Anthropic 100,000 requests and 256 MB of request body, OpenAI
50,000 requests and a 200 MB input file), and nightshift bounds it further by count
(``batch.steps.BATCH_SLICE``) so that submitting or applying one batch holds a bounded working
set. When a step is written its requests are not built yet (that happens at submission), so
their size is estimated from what is known: the request's tokens (the provider's last count of
the agent's window plus the estimate of what was added) and the bytes of the images sent with
this step's input. ``BYTES_PER_TOKEN`` is set high, so the real body comes out smaller than the
estimate, not larger: English text is about 4 bytes a token, and a new agent's request, mostly
tool definitions (to which the wire adds the agent's arguments), 5.3 (Anthropic) to 6.1
(OpenAI). A batch cut at the provider's limit on the estimate so stays under it with room to
spare (``NIGHTSHIFT_BATCH_BYTES`` lowers the cut). Images already in an agent's window count as
tokens only (a provider counts an image at about 1,600 tokens whatever its bytes), so there the
estimate can be low: a batch whose real body is over the limit is cut again at submission, by
its requests' real sizes, with the same ``split_by_size`` (``batch.submission``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

# Estimated bytes of a request per token of it (see the module docstring).
BYTES_PER_TOKEN: Final = 8
# What a request adds around its messages: the custom id, the wrapping, the model's parameters.
REQUEST_OVERHEAD_BYTES: Final = 512


def estimated_request_bytes(tokens: int, *, image_bytes: int = 0) -> int:
    """The estimated size of one request of ``tokens`` tokens carrying ``image_bytes`` of new images."""
    return REQUEST_OVERHEAD_BYTES + BYTES_PER_TOKEN * max(tokens, 0) + image_bytes


def split_by_size(sizes: Sequence[int], *, max_count: int, max_bytes: int) -> list[range]:
    """Cut requests, in order, into consecutive slices of at most ``max_count`` requests and
    ``max_bytes`` summed sizes: as few slices as the limits allow.

    A request larger than ``max_bytes`` on its own goes alone in its slice (the provider is the
    judge of it: the client refuses it if it is over the provider's own limit).

    Args:
        sizes: Each request's (estimated) size in bytes, in the order of the requests.
        max_count: The most requests in one slice (at least 1).
        max_bytes: The most bytes in one slice.

    Returns:
        The slices as ranges of indexes into ``sizes``, covering every one in order.
    """
    if max_count < 1:
        raise ValueError(f"max_count must be at least 1, got {max_count}")
    slices: list[range] = []
    start, total = 0, 0
    for index, size in enumerate(sizes):
        if index > start and (index - start >= max_count or total + size > max_bytes):
            slices.append(range(start, index))
            start, total = index, 0
        total += size
    if start < len(sizes):
        slices.append(range(start, len(sizes)))
    return slices
