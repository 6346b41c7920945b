"""Train minGPT's `mingpt/model.py` (unmodified) for a few steps, with its own `configure_optimizers` and the
defaults of its Trainer (whose data loader needs a lazy endless sampler, see chapter 18b); then sample."""
import os, sys
import torch
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'mingpt'))
from mingpt.model import GPT
from mingpt.trainer import Trainer

torch.manual_seed(3407)
config = GPT.get_default_config()
config.model_type, config.vocab_size, config.block_size = 'gpt-nano', 16, 12
config.embd_pdrop = config.resid_pdrop = config.attn_pdrop = 0.0
model = GPT(config)
tc = Trainer.get_default_config()
tc.learning_rate = 5e-3
opt = model.configure_optimizers(tc)
for it in range(int(os.environ.get('STEPS', 6))):
    x = torch.randint(16, (4, 12))
    y = torch.flip(x, [1])
    logits, loss = model(x, y)
    model.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), tc.grad_norm_clip)
    opt.step()
    print(f"iter {it}: loss {loss.item():.5f}")
model.eval()
print('sample', model.generate(torch.zeros((1, 1), dtype=torch.long), 6, do_sample=True, top_k=4)[0].tolist())
