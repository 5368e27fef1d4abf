"""The benches import downward: shared set-up lives in bench/setup.py and bench/measure.py, and no bench module
imports one that imports it back (bench/run.py and bench/cas_floor.py, bench/load.py once did, through imports
inside functions, which grimp reads too)."""

from __future__ import annotations

import grimp


def test_the_bench_package_has_no_import_cycle() -> None:
    graph = grimp.build_graph("bench")
    cycles = sorted(
        (module, imported)
        for module in graph.modules
        for imported in graph.find_modules_directly_imported_by(module)
        if graph.chain_exists(importer=imported, imported=module)
    )
    assert cycles == []
    assert "bench.setup" in graph.find_modules_directly_imported_by("bench.run")
