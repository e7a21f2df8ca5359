"""PyTorch eager twin of transformer_infer.cpp: torch.nn.TransformerEncoder of 12
TransformerEncoderLayer(256, 4, 1024, dropout=0, activation="gelu", batch_first=True,
norm_first=True) with a causal mask, one sequence of 128 tokens, eval and inference mode, fp32
(or bf16 autocast with "bf16").
Usage: python3 transformer_infer_torch.py THREADS [windows] [fp32|bf16]
Prints "median <ms per step>" over `windows` windows of 10 steps after 5 warm-up steps."""
import sys

import torch

from windows import median_window, twin_arguments

L, B, S, D, H, WINDOW, WARMUP = 12, 1, 128, 256, 4, 10, 5


def main():
    windows, bf16 = twin_arguments(sys.argv)
    layer = torch.nn.TransformerEncoderLayer(D, H, 4 * D, dropout=0.0, activation="gelu", batch_first=True,
                                             norm_first=True)
    stack = torch.nn.TransformerEncoder(layer, L, enable_nested_tensor=False).eval()
    x = torch.randn(B, S, D)
    mask = torch.nn.Transformer.generate_square_subsequent_mask(S)

    def infer():
        with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            return stack(x, mask=mask).float()

    seconds, h = median_window(infer, WARMUP, WINDOW, windows)
    print("torch %d-block inference (%s): sum %.4f, median %.2f ms per step" % (L, "bf16 autocast" if bf16 else "fp32",
                                                                                  h.sum().item(), seconds * 1e3 / WINDOW))


if __name__ == "__main__":
    main()
