"""Floor 5, the update: the one engine every optimizer step goes through (engine), its loss terms (losses, pure
tensor math; policy_gradient, the policy loss over buffered samples) and the optimizer (optim)."""
