"""The items of Tree.append_batch: ItemNode, AppendItem, AppendResult."""

import collections

from . import _lib


class ItemNode:
    """The parent of a Tree.append_batch item that is the node made by an
    earlier item of the same call: ItemNode(i) for items[i] (a node item)."""

    __slots__ = ("index",)

    def __init__(self, index):
        index = int(index)
        if index < 0:
            raise ValueError("ItemNode: the item index must be >= 0, got %d" % index)
        self.index = index

    def __repr__(self):
        return "ItemNode(%d)" % self.index

    def __eq__(self, other):
        return isinstance(other, ItemNode) and other.index == self.index

    def __hash__(self):
        return hash(("ItemNode", self.index))


class AppendItem:
    """One item of Tree.append_batch.

    parent: an existing node id, or ItemNode(i) for the node of an earlier
    item i. tokens: the item's tokens. cache: None for a new tree node,
    else a Cache of the same tree: the item is a new sequence of it under
    parent, with tokens as its first own tokens, evaluated by the call.
    want_logits: also return the logits of the item's last token (needs
    tokens)."""

    __slots__ = ("parent", "tokens", "cache", "want_logits")

    def __init__(self, parent, tokens, cache=None, want_logits=False):
        self.parent = parent
        self.tokens = tokens
        self.cache = cache
        self.want_logits = want_logits

    def __repr__(self):
        return "AppendItem(parent=%r, tokens=%r, cache=%r, want_logits=%r)" % (
            self.parent, self.tokens, self.cache, self.want_logits)


# What Tree.append_batch gives per item: node (a node item's new node, else
# None), seq (a sequence item's new sequence, else None) and logits (a list
# of n_vocab floats with want_logits, else None).
AppendResult = collections.namedtuple("AppendResult", ["node", "seq", "logits"])


def _append_item(x, i):
    if isinstance(x, AppendItem):
        return x
    if isinstance(x, dict):
        try:
            return AppendItem(**x)
        except TypeError as e:
            raise TypeError("append_batch item %d: %s" % (i, e)) from None
    if isinstance(x, (tuple, list)):
        if not 2 <= len(x) <= 4:
            raise TypeError("append_batch item %d: a tuple is (parent, tokens[, cache[, "
                            "want_logits]]), got %d fields" % (i, len(x)))
        return AppendItem(*x)
    raise TypeError("append_batch item %d: an AppendItem, a dict or a tuple, not %s"
                    % (i, type(x).__name__))


def _parent_id(parent, i):
    if isinstance(parent, ItemNode):
        return _lib.CLADE_ITEM_NODE(parent.index)
    if isinstance(parent, bool) or not isinstance(parent, int):
        raise TypeError("append_batch item %d: parent is a node id or an ItemNode, not %s"
                        % (i, type(parent).__name__))
    return parent
