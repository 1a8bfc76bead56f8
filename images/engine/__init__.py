"""The container engine: one port the stages depend on, and the Docker adapters behind it.

    port.py           what the build pipeline, the serve stage and the publish stage ask of an
                      engine (``BuildEngine``, ``ServingEngine``, ``ImageInspector``) and the
                      values that cross it (``LocalImage``, ``BuildRequest``, ``Mount``, ...)
    docker_sdk.py     the docker SDK client, and its failures as one ``DockerError`` each
    docker_cli.py     the docker CLI that builds with BuildKit, and a build's output
    docker_build.py   ``DockerEngine``: build, inspect, run and tag images (``BuildEngine``)
    docker_serve.py   ``DockerServingEngine``: server containers and their facts
    docker_inspect.py ``DockerInspector``: an image's facts and files (``ImageInspector``)
    docker_login.py   ``find_docker_login``: a registry login from the Docker config

Only the ``docker_*`` modules import ``docker`` or run the docker CLI (pyproject.toml's import
contract and ruff's banned-api hold it); the stages import the port, and construct an adapter
only where a command starts.
"""
