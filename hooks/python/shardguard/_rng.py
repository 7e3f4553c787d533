"""RNG states of Python's `random`, numpy's global RNG and torch's CPU RNG, as one blob.

The blob is JSON (never pickle: loading a checkpoint must not run code) tagged with FORMAT;
numpy and torch states are captured only when those modules are already imported. Floats
go through repr(), which round-trips exactly. Not thread-safe with respect to other threads
drawing random numbers while a capture or restore runs.
"""

import base64
import json
import random
import sys

FORMAT = "shardguard.python.rng/1"


def capture():
    """The current RNG states as bytes."""
    version, internal, gauss = random.getstate()
    state = {"format": FORMAT, "python": [version, list(internal), gauss]}
    np = sys.modules.get("numpy")
    if np is not None:
        name, keys, pos, has_gauss, cached = np.random.get_state()
        state["numpy"] = {
            "name": name,
            "keys": base64.b64encode(np.asarray(keys, dtype="<u4").tobytes()).decode(),
            "pos": int(pos), "has_gauss": int(has_gauss), "cached_gaussian": float(cached)}
    torch = sys.modules.get("torch")
    if torch is not None:
        raw = torch.get_rng_state().numpy().tobytes()
        state["torch"] = base64.b64encode(raw).decode()
    return json.dumps(state, separators=(",", ":")).encode()


def restore(blob):
    """Restores what capture() saved; returns False (changing nothing) when `blob` is not
    ours, e.g. written by a C++ trainer."""
    try:
        state = json.loads(bytes(blob).decode())
    except (ValueError, UnicodeDecodeError):
        return False
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        return False
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    np = sys.modules.get("numpy")
    if np is not None and "numpy" in state:
        s = state["numpy"]
        keys = np.frombuffer(base64.b64decode(s["keys"]), dtype="<u4").astype(np.uint32)
        np.random.set_state((s["name"], keys, s["pos"], s["has_gauss"], s["cached_gaussian"]))
    torch = sys.modules.get("torch")
    if torch is not None and "torch" in state:
        raw = bytearray(base64.b64decode(state["torch"]))
        torch.set_rng_state(torch.frombuffer(raw, dtype=torch.uint8).clone())
    return True
