"torchvision.utils stand-in: save_image writes the tensor's float32 values, raw (no image encoding)."
import numpy as np

def save_image(tensor, fp, nrow=8, **kwargs):
    np.asarray(tensor.detach().cpu().numpy(), 'float32').tofile(fp)
