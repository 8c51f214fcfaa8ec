import json
import pathlib

TESTDATA = pathlib.Path(__file__).resolve().parents[2] / "testdata"


def vectors(name: str) -> dict:
    """The shared test vectors (sdk/testdata), read by the Go client's tests too."""
    return json.loads((TESTDATA / name).read_text(encoding="utf-8"))
