"""RocketMQ 4.x remoting protocol (facts §8): frames, stored records, message ids."""
