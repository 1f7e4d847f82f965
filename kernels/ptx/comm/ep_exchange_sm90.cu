// ep_dispatch and ep_combine for sm_90a: ep_exchange.cu with dispatch's rows stored by bulk
// copies (cp.async.bulk, the tensor memory accelerator) from a per-warp staging ring instead of
// the lanes' 16-byte stores. The ops layer registers it as ep_dispatch "sm90.tma".
// Device code only (compiled with `nvcc -ptx`).
#define HC_EP_TMA_STORES 1
#include "ep_exchange.cu"
