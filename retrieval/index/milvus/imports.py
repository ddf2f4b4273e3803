"""pymilvus, imported without letting it read our MILVUS_URI.

pymilvus reads MILVUS_URI from the environment when it is imported and accepts only
http(s)://; ours may be a Milvus Lite path (`var/milvus.db`), which made every command crash at
import. The variable is hidden from it for the import and put back for child processes.
"""

from __future__ import annotations

import os

_ours = os.environ.pop("MILVUS_URI", None)
try:
    from pymilvus import (  # noqa: E402
        AnnSearchRequest,
        DataType,
        Function,
        FunctionType,
        MilvusClient,
        RRFRanker,
    )
    from pymilvus.client.types import LoadState  # noqa: E402
    from pymilvus.exceptions import MilvusException  # noqa: E402
finally:
    if _ours is not None:
        os.environ["MILVUS_URI"] = _ours

__all__ = ["AnnSearchRequest", "DataType", "Function", "FunctionType", "LoadState",
           "MilvusClient", "MilvusException", "RRFRanker"]
