"""One text toolkit: terms in any language (CJK included), query terms and FTS5 expressions,
scores and fusion, the in-process vector index, chunking.

``_terms`` (scripts, segmentation, stop words), ``_query`` (query terms, FTS5
expressions), ``_scores`` (coverage, IDF, fusion, weighting, near duplicates),
``_vectors`` (`VectorIndex`), ``_chunk`` (documents into passages).
"""
