"""The serving stage, between build and publish: does the image serve, and as fast as the
image it replaces?

    profile (manifest/serving.py) -> launch spec -> server lifetime (engine) -> requests
        serve-check: semantic requests + log patterns        -> ServeCheckBundle
        ab:          preflight, lifetimes A1 B1 [B2 A2], runs -> AbReport (Markdown, JSON, PNG)

    launch.py     the profile and an image -> the container to start (pure)
    client.py     the streaming OpenAI-compatible client, with vllm bench serve's metrics
    server.py     one server lifetime: start, wait for health, logs, stop (through the engine)
    preflight.py  what must hold before any server starts (pure checks over engine facts)
    stats.py      percentiles, the pooled rows, bootstrap intervals, the verdict (pure)
    report.py     the A/B report as Markdown and JSON (pure); plot.py the PNG
    check.py      serve-check and its evidence bundle; ab.py the A/B run
    commands.py   the command line: serve-check, ab
"""
