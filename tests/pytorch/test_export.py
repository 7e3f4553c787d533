"""`shardguard ckpt export` of a PyTorch training checkpoint into what `from_pretrained`
loads: only model.* (--include), without the "model." prefix (--rename-prefix), as BF16
(--dtype bf16) bit-equal to torch's own .to(torch.bfloat16), integers untouched; the
result loads with load_state_dict(strict=True); split files get an index with the new
names; bad flags exit 2. Skips (77) without torch."""

import json
import os
import struct
import subprocess

import sgrun

sgrun.require_torch()

import torch  # noqa: E402

import shardguard  # noqa: E402

ST_TO_TORCH = {"BF16": torch.bfloat16, "F32": torch.float32, "F64": torch.float64,
               "F16": torch.float16, "I64": torch.int64}


def read_safetensors(path):
    """{name: tensor} of a safetensors file (the format's own rules, no library)."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    body = data[8 + n:]
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        a, b = e["data_offsets"]
        t = torch.frombuffer(bytearray(body[a:b]), dtype=ST_TO_TORCH[e["dtype"]])
        out[name] = t.reshape(e["shape"])
    return out, header.get("__metadata__")


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(2)
        self.fc1 = torch.nn.Linear(33, 65)
        self.norm = torch.nn.BatchNorm1d(65)
        self.fc2 = torch.nn.Linear(65, 3).double()
        self.register_buffer("scale", (torch.randn(7) * 1e3).half())

    def forward(self, x):
        return self.fc2(self.norm(self.fc1(x)).double()) * self.scale[0]


class ExportTest(sgrun.TempDirCase):
    def export(self, *flags):
        return subprocess.run([sgrun.shardguard_bin(), "ckpt", "export", self.path("ckpt"),
                               "--out", self.path("hf")] + list(flags),
                              capture_output=True, text=True, timeout=120, env=sgrun.clean_env())

    def save(self):
        net = Net()
        opt = torch.optim.AdamW(net.parameters())
        net(torch.randn(4, 33)).sum().backward()
        opt.step()
        ckpt = shardguard.Checkpointer(self.path("ckpt"))
        ckpt.save(10, {"model": net.state_dict(), "optim": opt.state_dict(), "step": 10})
        ckpt.close()
        return net

    def test_model_only_renamed_bf16_loads_strictly(self):
        net = self.save()
        r = self.export("--include", "model.*", "--rename-prefix", "model.=", "--dtype", "bf16")
        self.assertEqual(r.returncode, 0, r.stderr)
        got, meta = read_safetensors(self.path("hf", "model.safetensors"))
        self.assertEqual(meta, {"format": "pt"})
        want = net.state_dict()
        self.assertEqual(sorted(got), sorted(want))
        for name, t in want.items():
            expected = t.to(torch.bfloat16) if t.is_floating_point() else t
            self.assertEqual(got[name].dtype, expected.dtype, name)
            self.assertEqual(got[name].reshape(-1).view(torch.uint8).tolist(),
                             expected.reshape(-1).view(torch.uint8).tolist(), name)
        fresh = Net().to(torch.bfloat16)
        fresh.load_state_dict(got, strict=True)  # what from_pretrained does with the files

    def test_bf16_matches_torch_on_hard_values(self):
        g = torch.Generator().manual_seed(1)
        values = torch.cat([torch.randn(5000, generator=g) * 10 ** torch.randint(-40, 38, (5000,),
                                                                                  generator=g),
                            torch.tensor([0.0, -0.0, float("inf"), float("-inf"), float("nan"),
                                          3.4028234663852886e38, 1e-45, 1.0039062, 1.0117188])])
        state = {"f32": values, "f64": values.double() * (1 + 2 ** -30),
                 "f16": values.clamp(-60000, 60000).half()}
        ckpt = shardguard.Checkpointer(self.path("ckpt"))
        ckpt.save(1, state)
        ckpt.close()
        r = self.export("--dtype", "bf16", "--max-shard-size", "12KB")
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(self.path("hf", "model.safetensors.index.json")) as f:
            index = json.load(f)
        got = {}
        for file in sorted(set(index["weight_map"].values())):
            got.update(read_safetensors(self.path("hf", file))[0])
        self.assertEqual(sorted(index["weight_map"]), ["f16", "f32", "f64"])
        for name, t in state.items():
            want = t.to(torch.bfloat16)
            # NaN: torch's vector kernel writes 0xFFFF, its scalar one 0x7FC0 (ours): any NaN.
            self.assertTrue(torch.equal(got[name].isnan(), want.isnan()), name)
            keep = ~want.isnan()
            self.assertEqual(got[name][keep].view(torch.int16).tolist(),
                             want[keep].view(torch.int16).tolist(), name)

    def test_bad_flags_exit_2_and_name_the_flag(self):
        self.save()
        for flags, words in ((["--dtype", "fp8"], "--dtype"),
                             (["--rename-prefix", "model."], "--rename-prefix"),
                             (["--include", "decoder.*"], "no tensor is selected"),
                             (["--include", "model.fc*", "--rename-prefix", "model.fc1.=x.",
                               "--rename-prefix", "model.fc2.=x."], "both be exported")):
            r = self.export(*flags)
            self.assertEqual(r.returncode, 2, r.stderr)
            self.assertIn(words, r.stderr)
        self.assertFalse(os.path.exists(self.path("hf", "model.safetensors")))


if __name__ == "__main__":
    sgrun.unittest.main(verbosity=2)
