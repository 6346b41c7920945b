"""Torch programs run unchanged with minima in torch's place (issue 21).

Three programs, written here the way PyTorch users write them (`import torch`, `import torch.nn as nn`,
`import torch.nn.functional as F`, `torch.optim`, `torch.utils.data`): a GPT in one file with its optimizer set-up
(weight decay groups, AdamW, clipping) and greedy generation; a convolutional classifier with the usual train and
test loops (Adadelta and StepLR); a character-level LSTM with truncated backpropagation through time and greedy
sampling. `run_as(lib, source)` executes a program's source with `torch`, `torch.nn`, `torch.nn.functional`,
`torch.optim`, `torch.optim.lr_scheduler`, `torch.utils.data` and `torch.nn.init` mapped to minima's modules (or
left as torch's), so the same text runs twice. Both runs start from the same weights (torch's initial `state_dict`,
loaded into minima's model) and see the same batches; losses, gradients, updated parameters and generated tokens must
agree to float32 rounding."""
import sys, textwrap
import numpy as np, torch

import minima

MAP = {'torch': 'minima', 'torch.nn': 'minima.nn', 'torch.nn.functional': 'minima.nn.functional',
       'torch.nn.init': 'minima.nn.init', 'torch.optim': 'minima.optim',
       'torch.optim.lr_scheduler': 'minima.optim.lr_scheduler', 'torch.utils': 'minima.utils',
       'torch.utils.data': 'minima.utils.data'}

def run_as(lib: str, source: str, **inputs) -> dict:
    """Execute `source` (a program that imports torch) with `lib` ('torch' or 'minima') behind the torch names, then
    call its `main(**inputs)` and return the result. sys.modules is restored afterwards."""
    import importlib
    saved = {k: sys.modules.get(k) for k in MAP}
    try:
        if lib == 'minima':
            for k, v in MAP.items(): sys.modules[k] = importlib.import_module(v)
        ns = {'__name__': f'program_{lib}'}
        exec(compile(textwrap.dedent(source), f'<program on {lib}>', 'exec'), ns)
        return ns['main'](**inputs)
    finally:
        for k, v in saved.items():
            if v is None: sys.modules.pop(k, None)
            else: sys.modules[k] = v

def as_np(x):
    if isinstance(x, dict): return {k: as_np(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)): return [as_np(v) for v in x]
    if isinstance(x, torch.Tensor): return x.detach().numpy()
    if isinstance(x, minima.Tensor): return x.detach().numpy()
    return x

def compare(ours, theirs, path='', rtol=2e-4, atol=2e-5):
    ours, theirs = as_np(ours), as_np(theirs)
    if isinstance(theirs, dict):
        assert sorted(ours) == sorted(theirs), (path, sorted(ours), sorted(theirs))
        for k in theirs: compare(ours[k], theirs[k], f'{path}.{k}', rtol, atol)
    elif isinstance(theirs, list):
        assert len(ours) == len(theirs), path
        for i, (a, b) in enumerate(zip(ours, theirs)): compare(a, b, f'{path}[{i}]', rtol, atol)
    elif isinstance(theirs, (int, np.integer, str)) or (isinstance(theirs, np.ndarray) and theirs.dtype.kind in 'iub'):
        np.testing.assert_array_equal(ours, theirs, err_msg=path)
    else: np.testing.assert_allclose(np.asarray(ours, dtype='float64'), np.asarray(theirs, dtype='float64'),
                                     rtol=rtol, atol=atol, err_msg=path)

# --- 1. a GPT in one file ------------------------------------------------------------------------------------------
GPT = '''
import math
import torch
import torch.nn as nn
from torch.nn import functional as F

class CausalSelfAttention(nn.Module):
    def __init__(self, n_embd, n_head):
        super().__init__()
        assert n_embd % n_head == 0
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)
        self.n_head, self.n_embd = n_head, n_embd

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y)

class MLP(nn.Module):
    def __init__(self, n_embd):
        super().__init__()
        self.c_fc = nn.Linear(n_embd, 4 * n_embd)
        self.gelu = nn.GELU()
        self.c_proj = nn.Linear(4 * n_embd, n_embd)

    def forward(self, x):
        return self.c_proj(self.gelu(self.c_fc(x)))

class Block(nn.Module):
    def __init__(self, n_embd, n_head):
        super().__init__()
        self.ln_1 = nn.LayerNorm(n_embd)
        self.attn = CausalSelfAttention(n_embd, n_head)
        self.ln_2 = nn.LayerNorm(n_embd)
        self.mlp = MLP(n_embd)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        x = x + self.mlp(self.ln_2(x))
        return x

class GPT(nn.Module):
    def __init__(self, vocab_size, block_size, n_layer, n_head, n_embd):
        super().__init__()
        self.block_size = block_size
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(vocab_size, n_embd),
            wpe=nn.Embedding(block_size, n_embd),
            h=nn.ModuleList([Block(n_embd, n_head) for _ in range(n_layer)]),
            ln_f=nn.LayerNorm(n_embd),
        ))
        self.lm_head = nn.Linear(n_embd, vocab_size, bias=False)
        self.transformer.wte.weight = self.lm_head.weight   # weight tying
        self.apply(self._init_weights)
        for pn, p in self.named_parameters():
            if pn.endswith('c_proj.weight'):
                torch.nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * n_layer))

    def _init_weights(self, module):
        if isinstance(module, nn.Linear):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                torch.nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def forward(self, idx, targets=None):
        b, t = idx.size()
        assert t <= self.block_size, f"Cannot forward sequence of length {t}"
        pos = torch.arange(0, t, dtype=torch.long)
        x = self.transformer.wte(idx) + self.transformer.wpe(pos)
        for block in self.transformer.h:
            x = block(x)
        x = self.transformer.ln_f(x)
        if targets is not None:
            logits = self.lm_head(x)
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)
        else:
            logits = self.lm_head(x[:, [-1], :])
            loss = None
        return logits, loss

    def configure_optimizers(self, weight_decay, learning_rate, betas):
        param_dict = {pn: p for pn, p in self.named_parameters()}
        param_dict = {pn: p for pn, p in param_dict.items() if p.requires_grad}
        decay_params = [p for n, p in param_dict.items() if p.dim() >= 2]
        nodecay_params = [p for n, p in param_dict.items() if p.dim() < 2]
        optim_groups = [
            {'params': decay_params, 'weight_decay': weight_decay},
            {'params': nodecay_params, 'weight_decay': 0.0},
        ]
        return torch.optim.AdamW(optim_groups, lr=learning_rate, betas=betas)

    @torch.no_grad()
    def generate(self, idx, max_new_tokens):
        for _ in range(max_new_tokens):
            idx_cond = idx if idx.size(1) <= self.block_size else idx[:, -self.block_size:]
            logits, _ = self(idx_cond)
            logits = logits[:, -1, :]
            idx_next = torch.argmax(logits, dim=-1, keepdim=True)
            idx = torch.cat((idx, idx_next), dim=1)
        return idx

def main(state=None, data=None):
    torch.manual_seed(1337)
    model = GPT(vocab_size=17, block_size=8, n_layer=2, n_head=2, n_embd=16)
    if state is not None:
        model.load_state_dict({k: torch.tensor(v) for k, v in state.items()})
    optimizer = model.configure_optimizers(weight_decay=0.1, learning_rate=1e-2, betas=(0.9, 0.95))
    out = {'state': {k: v.detach().clone().numpy() if hasattr(v, 'detach') else v.copy() for k, v in model.state_dict().items()},
           'losses': [], 'norms': []}
    model.train()
    for step, (xb, yb) in enumerate(data):
        x, y = torch.tensor(xb), torch.tensor(yb)
        logits, loss = model(x, y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        if step == 0:
            out['grads'] = {n: p.grad for n, p in model.named_parameters()}
        optimizer.step()
        out['losses'].append(loss.item()); out['norms'].append(float(norm))
    out['params'] = {n: p for n, p in model.named_parameters()}
    model.eval()
    out['tokens'] = model.generate(torch.tensor([[1, 2, 3]]), max_new_tokens=10)
    return out
'''

def _gpt_batches(n=6, B=4, T=8, V=17, seed=0):
    "Learnable sequences: each token is the previous one plus a step of 1 or 2 (mod V), chosen per sequence."
    r = np.random.default_rng(seed)
    seq = (r.integers(0, V, (n, B, 1)) + r.integers(1, 3, (n, B, 1)) * np.arange(T + 1)) % V
    return [(s[:, :-1].astype('int64'), s[:, 1:].astype('int64')) for s in seq]

def test_gpt_program_runs_unchanged():
    data = _gpt_batches()
    theirs = run_as('torch', GPT, data=data)
    ours = run_as('minima', GPT, state=theirs['state'], data=data)
    compare(ours['losses'], theirs['losses'], 'losses')
    compare(ours['norms'], theirs['norms'], 'norms')
    compare(ours['grads'], theirs['grads'], 'grads', atol=1e-5)
    # the key part of c_attn.bias has a zero gradient in exact arithmetic (softmax ignores a shift shared by a row), so
    # both libraries feed rounding noise (~1e-9) to Adam, which turns it into steps of ~1e-5 per step (its update is
    # lr * m / sqrt(v), of size lr whatever the gradient's size); over 6 steps one of 768 weights drifted by 1.4e-4
    # (the in-place optimizers of this session add up in another order): hence atol 3e-4, still far below lr (1e-2)
    compare(ours['params'], theirs['params'], 'params after 6 AdamW steps', atol=3e-4)
    compare(ours['tokens'], theirs['tokens'], 'greedy tokens')
    assert theirs['losses'][-1] < theirs['losses'][0]

# --- 2. a convolutional classifier with train and test loops -------------------------------------------------------
CONVNET = '''
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torch.optim.lr_scheduler import StepLR
from torch.utils.data import DataLoader, TensorDataset

class Net(nn.Module):
    def __init__(self, p_drop):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 8, 3, 1)
        self.conv2 = nn.Conv2d(8, 16, 3, 1)
        self.dropout1 = nn.Dropout(p_drop)
        self.dropout2 = nn.Dropout(p_drop)
        self.fc1 = nn.Linear(64, 32)
        self.fc2 = nn.Linear(32, 10)

    def forward(self, x):
        x = self.conv1(x)
        x = F.relu(x)
        x = self.conv2(x)
        x = F.relu(x)
        x = F.max_pool2d(x, 2)
        x = self.dropout1(x)
        x = torch.flatten(x, 1)
        x = self.fc1(x)
        x = F.relu(x)
        x = self.dropout2(x)
        x = self.fc2(x)
        output = F.log_softmax(x, dim=1)
        return output

def train(model, device, train_loader, optimizer, epoch, log):
    model.train()
    for batch_idx, (data, target) in enumerate(train_loader):
        data, target = data.to(device), target.to(device)
        optimizer.zero_grad()
        output = model(data)
        loss = F.nll_loss(output, target)
        loss.backward()
        if epoch == 1 and batch_idx == 0:
            log['grads'] = {n: p.grad for n, p in model.named_parameters()}
        optimizer.step()
        log['losses'].append(loss.item())

def test(model, device, test_loader, log):
    model.eval()
    test_loss = 0
    correct = 0
    with torch.no_grad():
        for data, target in test_loader:
            data, target = data.to(device), target.to(device)
            output = model(data)
            test_loss += F.nll_loss(output, target, reduction='sum').item()
            pred = output.argmax(dim=1, keepdim=True)
            correct += pred.eq(target.view_as(pred)).sum().item()
    test_loss /= len(test_loader.dataset)
    log['test'].append((test_loss, correct))

def main(state=None, X=None, y=None):
    device = 'cpu'
    torch.manual_seed(1)
    train_ds = TensorDataset(torch.tensor(X[:192]), torch.tensor(y[:192]))
    test_ds = TensorDataset(torch.tensor(X[192:]), torch.tensor(y[192:]))
    train_loader = DataLoader(train_ds, batch_size=32)
    test_loader = DataLoader(test_ds, batch_size=100)
    model = Net(p_drop=0.0).to(device)
    if state is not None:
        model.load_state_dict({k: torch.tensor(v) for k, v in state.items()})
    log = {'state': {k: v.detach().clone().numpy() if hasattr(v, 'detach') else v.copy() for k, v in model.state_dict().items()},
           'losses': [], 'test': [], 'lrs': []}
    optimizer = optim.Adadelta(model.parameters(), lr=1.0)
    scheduler = StepLR(optimizer, step_size=1, gamma=0.7)
    for epoch in range(1, 4):
        train(model, device, train_loader, optimizer, epoch, log)
        test(model, device, test_loader, log)
        scheduler.step()
        log['lrs'].append(scheduler.get_last_lr()[0])
    log['params'] = {n: p for n, p in model.named_parameters()}
    return log
'''

def test_conv_classifier_program_runs_unchanged():
    from minima.data import load_digits
    X, y = load_digits(images=True)
    X, y = X[:292], y[:292]
    theirs = run_as('torch', CONVNET, X=X, y=y)
    ours = run_as('minima', CONVNET, state=theirs['state'], X=X, y=y)
    compare(ours['losses'], theirs['losses'], 'losses', rtol=1e-3, atol=1e-4)
    compare(ours['grads'], theirs['grads'], 'grads', atol=1e-5)
    compare(ours['lrs'], theirs['lrs'], 'lrs')
    compare([c for _, c in ours['test']], [c for _, c in theirs['test']], 'correct')
    compare([l for l, _ in ours['test']], [l for l, _ in theirs['test']], 'test loss', rtol=1e-3, atol=1e-4)
    compare(ours['params'], theirs['params'], 'params', rtol=1e-3, atol=1e-4)
    assert theirs['test'][-1][1] > theirs['test'][0][1] or theirs['test'][0][1] > 50

# --- 3. a character-level recurrent model --------------------------------------------------------------------------
CHAR_RNN = '''
import torch
import torch.nn as nn

class CharLSTM(nn.Module):
    def __init__(self, vocab_size, embed_dim, hidden_size, num_layers):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, embed_dim)
        self.rnn = nn.LSTM(embed_dim, hidden_size, num_layers, batch_first=True)
        self.fc = nn.Linear(hidden_size, vocab_size)

    def forward(self, x, hidden=None):
        out, hidden = self.rnn(self.embed(x), hidden)
        return self.fc(out), hidden

def batches(ids, batch_size, seq_len):
    n = (len(ids) - 1) // (batch_size * seq_len) * batch_size * seq_len
    x = torch.tensor(ids[:n]).view(batch_size, -1)
    y = torch.tensor(ids[1:n + 1]).view(batch_size, -1)
    for i in range(0, x.size(1), seq_len):
        yield x[:, i:i + seq_len], y[:, i:i + seq_len]

def main(state=None, text=''):
    chars = sorted(set(text))
    stoi = {c: i for i, c in enumerate(chars)}
    itos = {i: c for c, i in stoi.items()}
    ids = [stoi[c] for c in text]
    model = CharLSTM(len(chars), 8, 24, 2)
    if state is not None:
        model.load_state_dict({k: torch.tensor(v) for k, v in state.items()})
    out = {'state': {k: v.detach().clone().numpy() if hasattr(v, 'detach') else v.copy() for k, v in model.state_dict().items()},
           'losses': []}
    criterion = nn.CrossEntropyLoss()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    for epoch in range(2):
        hidden = None
        for step, (x, y) in enumerate(batches(ids, 4, 12)):
            if hidden is not None:
                hidden = tuple(h.detach() for h in hidden)
            logits, hidden = model(x, hidden)
            loss = criterion(logits.reshape(-1, len(chars)), y.reshape(-1))
            optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            if epoch == 0 and step == 1:
                out['grads'] = {n: p.grad for n, p in model.named_parameters()}
            optimizer.step()
            out['losses'].append(loss.item())
    model.eval()
    with torch.no_grad():
        x = torch.tensor([[stoi['T']]])
        hidden, sample = None, 'T'
        for _ in range(30):
            logits, hidden = model(x, hidden)
            nxt = logits[0, -1].argmax().item()
            sample += itos[nxt]
            x = torch.tensor([[nxt]])
    out['sample'] = sample
    return out
'''

TEXT = ("To be, or not to be, that is the question: Whether 'tis nobler in the mind to suffer the slings and arrows "
        "of outrageous fortune, or to take arms against a sea of troubles and by opposing end them. To die: to sleep; "
        "no more; and by a sleep to say we end the heart-ache and the thousand natural shocks that flesh is heir to.")

def test_char_rnn_program_runs_unchanged():
    theirs = run_as('torch', CHAR_RNN, text=TEXT)
    ours = run_as('minima', CHAR_RNN, state=theirs['state'], text=TEXT)
    compare(ours['losses'], theirs['losses'], 'losses', rtol=1e-3, atol=1e-4)
    compare(ours['grads'], theirs['grads'], 'grads', atol=1e-5)
    assert ours['sample'] == theirs['sample'], (ours['sample'], theirs['sample'])
    assert theirs['losses'][-1] < theirs['losses'][0]

def test_run_as_restores_torch():
    run_as('minima', "import torch\ndef main(): return torch.__name__")
    assert sys.modules['torch'] is torch and run_as('minima', "import torch\ndef main(): return torch.__name__") == 'minima'
