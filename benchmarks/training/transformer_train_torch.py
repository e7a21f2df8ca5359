"""PyTorch eager twin of transformer_train.cpp: torch.nn.TransformerEncoderLayer(256, 4, 1024,
dropout=0, activation="gelu", batch_first=True, norm_first=True) with a causal mask, batch 8 x 128
tokens, loss the mean square of its output, loss.backward() and AdamW (lr 1e-3) per step, fp32
(or bf16 autocast with "bf16").
Usage: python3 transformer_train_torch.py THREADS [windows] [fp32|bf16]
Prints "median <ms per step>" over `windows` windows of 10 steps after 5 warm-up steps."""
import sys

import torch

from windows import median_window, twin_arguments

B, S, D, H, WINDOW, WARMUP = 8, 128, 256, 4, 10, 5


def main():
    windows, bf16 = twin_arguments(sys.argv)
    layer = torch.nn.TransformerEncoderLayer(D, H, 4 * D, dropout=0.0, activation="gelu", batch_first=True,
                                             norm_first=True)
    opt = torch.optim.AdamW(layer.parameters(), lr=1e-3)
    x = torch.randn(B, S, D)
    mask = torch.nn.Transformer.generate_square_subsequent_mask(S)

    def train():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            loss = layer(x, src_mask=mask).float().square().mean()
        loss.backward()
        opt.step()
        return loss

    seconds, loss = median_window(train, WARMUP, WINDOW, windows)
    print("torch transformer block (%s): loss %.4f, median %.2f ms per step" % ("bf16 autocast" if bf16 else "fp32",
                                                                                loss.item(), seconds * 1e3 / WINDOW))


if __name__ == "__main__":
    main()
