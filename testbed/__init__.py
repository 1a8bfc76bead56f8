"""The test bed: the stand-in indexes, wheels, worlds and servers that the tests, the benches
and the demos run against.

Real HTTP servers on 127.0.0.1 and real wheel and sdist files, no mocks:

- ``distributions``: deterministic wheels and sdists (pip installs the wheels);
- ``simple_index``: PEP 503 / PEP 691 simple-index trees, and find-links pages, over them;
- ``files``: the atomic, deterministic file writes both make;
- ``index_server``: ``IndexServer``, an HTTP(S) server of such a tree whose answers a test
  shapes (failures, delays, slow or cut bodies); ``index_handler`` answers its requests and
  ``http_rules`` reads them (content negotiation, conditional requests, byte ranges);
- ``pypi_server``: the real ``pypi-server``; ``nginx``: the Debian nginx (the benches);
- ``lifetime``: ``Served``, the ``with`` block every server here has (start, stop);
- ``tls``: a private certificate authority for HTTPS indexes;
- ``manifests``: stack manifests written from keyword arguments;
- ``closuregen``: a generated two-index world, a public index of many projects and a vendor one;
- ``serving``: the demo's stand-in ``vllm serve``, and serve-check evidence as the tool writes it.

It is not installed with the tool (pyproject.toml lists the tool's packages); the tests, the
benches and the demos import it from the root of a checkout.
"""
