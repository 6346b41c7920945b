"""Train nanoGPT's `model.py` (unmodified) for a few steps, the way its train.py does: AdamW with weight-decay groups
from `configure_optimizers`, gradient clipping, a cosine learning rate; then sample with `generate(top_k=...)`."""
import math, os, sys
import torch
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'nanogpt'))
from model import GPT, GPTConfig

torch.manual_seed(1337)
V, T, B, steps = 32, 16, 4, int(os.environ.get('STEPS', 6))
model = GPT(GPTConfig(block_size=T, vocab_size=V, n_layer=2, n_head=2, n_embd=16, dropout=0.0, bias=True))
opt = model.configure_optimizers(weight_decay=0.1, learning_rate=1e-2, betas=(0.9, 0.95), device_type='cpu')
for it in range(steps):
    lr = 1e-2 * 0.5 * (1 + math.cos(math.pi * it / steps))
    for g in opt.param_groups: g['lr'] = lr
    x = torch.randint(V, (B, T))
    y = torch.roll(x, -1, 1)
    logits, loss = model(x, y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    print(f"iter {it}: loss {loss.item():.4f}")
model.eval()
with torch.no_grad():
    print('sample', model.generate(torch.zeros((1, 1), dtype=torch.long), 8, temperature=0.8, top_k=5)[0].tolist())
