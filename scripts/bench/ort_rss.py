"""onnxruntime's peak resident memory on models/NAME: a session with 2 threads
and five runs on the saved inputs (ru_maxrss of this process, MB)."""
import resource
import sys

import numpy as np
import onnxruntime as ort

name = sys.argv[1]
opts = ort.SessionOptions()
opts.intra_op_num_threads = 2
opts.inter_op_num_threads = 1
session = ort.InferenceSession(f"models/{name}/model.onnx", opts, providers=["CPUExecutionProvider"])
feeds = {inp.name: np.load(f"models/{name}/input_{i}.npy") for i, inp in enumerate(session.get_inputs())}
for _ in range(5):
    session.run(None, feeds)
print(f"{name}: onnxruntime peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB")
