"""nn.TransformerEncoder in eval with a padding mask: its fast path packs the batch into a nested tensor."""
import torch
import torch.nn as nn

dev = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)
layer = nn.TransformerEncoderLayer(d_model=32, nhead=4, dim_feedforward=64, batch_first=True, dropout=0.1)
model = nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=True).to(dev).eval()
compiled = torch.compile(model)
x = torch.randn(3, 10, 32, device=dev)
pad = torch.zeros(3, 10, dtype=torch.bool, device=dev)
pad[1, 6:] = True
pad[2, 3:] = True
with torch.no_grad():
    out = compiled(x, src_key_padding_mask=pad)
    print(out.shape, out[0, 0, :4].tolist())
