#!/bin/bash
# One feature-extraction job over a Ray cluster: an actor per GPU (--gpus-per-worker 1) on every node,
# each building its graph once and pulling the next shard when free, so faster nodes take more.
# Every node needs this repository installed (pip install -e '.[gpu,ray]'), the weights at the same
# path, and the images and the output on storage all nodes see.

# On the head node:
ray start --head --num-gpus 4
# On each other node (HEAD_IP: the head's address):
#   ray start --address HEAD_IP:6379 --num-gpus 4

# Then, from any node of the cluster:
python run_inference.py --images /shared/photos --output /shared/features/photos.parquet --format parquet \
    --weights /shared/weights/vgg16.npy --distributed ray --ray-address auto --gpus-per-worker 1

# Rerun the same command after a failure: committed shards are kept, a dead actor's shard is redone.
# One machine, no cluster: leave out --ray-address (a local Ray is started and stopped).
# CPU only: --gpus-per-worker 0 (an actor per CPU Ray offers; TensorFlow uses every core in each).
