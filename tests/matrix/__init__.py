"""The composition matrix of issue 40: every strategy x form x layer x consumer, each cell either
working or refused when it is built.

- ``factors.py``: the factor values, the per-strategy settings (a table keyed by registry name),
  the words that name each part in an error message;
- ``corpus.py``: the small corpus every cell runs on, its token files, and how a delivered batch
  is read back into tokens;
- ``cells.py``: building and running one cell, its checks and its classification (``works``,
  ``refused``, ``refused_unhelpful``, ``late``, ``silent``, ``crash``);
- ``pairwise.py``: the covering array that ``make test`` runs (every pair of factor values);
- ``known.py``: the cells refused today (with a message fragment) and the ones broken today;
- ``census.py``: ``python -m tests.matrix.census`` runs every cell and prints the counts.
"""
