"""The scale benchmark, ``python -m bench.scale`` (``__main__``): the fill (``fill``), the
ledger's layout and statements (``ledger``), the measurements (``phases``) and the API and
console client (``reads``)."""
