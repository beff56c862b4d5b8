"""A policy's facts worked out once: each node class's GPU, sizing, offers and node labels, the admission-policy
document the webhook loads, the node-label plan and HAMi's scope."""
