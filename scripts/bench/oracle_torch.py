"""PyTorch peer for the oracle crops (docs/learning.md): the same encoders bigtrain's
presets build, the same optimizer and schedule, trained on the crops of
scripts/bench/evidence_crops_cpp. It tells a bigtrain training bug from a limit of
the encoder or of frozen BatchNorm: both frameworks must show the same thing.

  /usr/bin/python3 scripts/bench/oracle_torch.py --data data/oracle --arch resnet18 --width 0.25 --bn train
"""
import argparse, csv, time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from PIL import Image

parser = argparse.ArgumentParser()
parser.add_argument('--data', required=True, help='folder with train.csv / val.csv of evidence_crops_cpp')
parser.add_argument('--arch', choices=['small', 'resnet18'], default='small')
parser.add_argument('--width', type=float, default=0.5)
parser.add_argument('--bn', choices=['train', 'frozen'], default='train',
                    help='frozen: statistics calibrated on 32 crops at initialisation, as train.freeze_bn does')
parser.add_argument('--epochs', type=int, default=6)
parser.add_argument('--lr', type=float, default=2e-3)
parser.add_argument('--batch', type=int, default=16)
parser.add_argument('--threads', type=int, default=1)
args = parser.parse_args()
torch.set_num_threads(args.threads)
torch.manual_seed(0)


def load(split):
    # Half resolution (tiler.downsample 2), each crop standardised (data.normalize: tile).
    rows = list(csv.DictReader(open(f'{args.data}/{split}.csv')))
    crops = []
    for row in rows:
        a = np.asarray(Image.open(f"{args.data}/{row['path']}").convert('L'), dtype=np.float32) / 255.0
        h, w = a.shape
        a = a.reshape(h // 2, 2, w // 2, 2).mean(axis=(1, 3))
        crops.append((a - a.mean()) / (a.std() + 1e-6))
    return torch.tensor(np.stack(crops))[:, None], torch.tensor([int(r['label']) for r in rows])


def conv_bn_relu(i, o, k, s):
    return [nn.Conv2d(i, o, k, s, k // 2, bias=False), nn.BatchNorm2d(o), nn.ReLU()]


class BasicBlock(nn.Module):
    def __init__(self, i, o, stride):
        super().__init__()
        self.body = nn.Sequential(*conv_bn_relu(i, o, 3, stride), nn.Conv2d(o, o, 3, 1, 1, bias=False), nn.BatchNorm2d(o))
        self.shortcut = nn.Sequential() if (i == o and stride == 1) else nn.Sequential(
            nn.Conv2d(i, o, 1, stride, bias=False), nn.BatchNorm2d(o))

    def forward(self, x):
        return F.relu(self.body(x) + self.shortcut(x))


def scaled(channels):
    return [max(1, round(c * args.width)) for c in channels]


if args.arch == 'small':  # bigtrain's `small`, stem 5/2: one strided convolution a stage
    c = scaled((16, 32, 48, 64))
    layers = [*conv_bn_relu(1, c[0], 5, 2), *conv_bn_relu(c[0], c[1], 3, 2), *conv_bn_relu(c[1], c[2], 3, 2),
              *conv_bn_relu(c[2], c[3], 3, 2)]
    features = c[3]
else:  # bigtrain's resnet18, stem 5/2 without max pooling
    p = scaled((64, 128, 256, 512))
    layers = [*conv_bn_relu(1, p[0], 5, 2)]
    features = p[0]
    for stage, planes in enumerate(p):
        layers += [BasicBlock(features, planes, 1 if stage == 0 else 2), BasicBlock(planes, planes, 1)]
        features = planes
net = nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(features, 10))

xtr, ytr = load('train')
xva, yva = load('val')
opt = torch.optim.AdamW(net.parameters(), lr=args.lr, weight_decay=0.01)
steps = args.epochs * (len(xtr) // args.batch)
sched = torch.optim.lr_scheduler.OneCycleLR(opt, args.lr, total_steps=steps, pct_start=0.05, anneal_strategy='cos')
batch_norms = [m for m in net.modules() if isinstance(m, nn.BatchNorm2d)]
if args.bn == 'frozen':
    for m in batch_norms:
        m.momentum = None  # cumulative average over the calibration batch
    net.train()
    with torch.no_grad():
        net(xtr[:32])
for epoch in range(args.epochs):
    start = time.time()
    perm = torch.randperm(len(xtr))
    net.train()
    if args.bn == 'frozen':
        for m in batch_norms:
            m.eval()
    loss_sum, correct = 0.0, 0
    for i in range(0, len(xtr) - args.batch + 1, args.batch):
        idx = perm[i:i + args.batch]
        out = net(xtr[idx])
        loss = F.cross_entropy(out, ytr[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        loss_sum += loss.item() * len(idx)
        correct += (out.argmax(1) == ytr[idx]).sum().item()
    net.eval()
    with torch.no_grad():
        val_acc = (net(xva).argmax(1) == yva).float().mean().item()
    print(f'epoch {epoch + 1} train loss {loss_sum / len(xtr):.3f} acc {correct / len(xtr):.3f} '
          f'val acc {val_acc:.3f} ({time.time() - start:.1f} s)', flush=True)
