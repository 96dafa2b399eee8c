"""One text toolkit: terms in any language (CJK included), lexical scores, vector maths, fusion, chunking."""
