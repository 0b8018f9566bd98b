"""StackOverflow next-word prediction data: the public names of the data modules, in one place.

The setting of paper 004 Sec. 4.1 (Table 3), which follows its ref. [8] and TFF's
StackOverflow baseline (`tff.simulation.baselines.stackoverflow`): a vocabulary of the
10,000 most frequent words, 1 out-of-vocabulary (OOV) bucket, sentences cut to 20 words.
The code lives in the modules below (split as TFF splits `simulation/datasets/stackoverflow`
from `baselines/stackoverflow/word_prediction_preprocessing`); this module re-exports their
public names so that `from tasks.stackoverflow import data; data.load_vocab(...)` works.

    module          holds
    database        DATABASE_FILENAME, SPLITS, check_database, load_client_data: TFF's SQLite
                    format, its checks, loading with TFF's `load_data`
    vocab           TRAIN_WORD_COUNT_FILENAME, DEFAULT_VOCAB_SIZE, DEFAULT_NUM_OOV_BUCKETS,
                    read_word_counts, write_word_counts, count_train_words, load_vocab; the
                    token ids: TokenIds, token_ids; the metric names NUM_TOKENS, ACCURACY,
                    ACCURACY_WITHOUT_OOV, ACCURACY_WITHOUT_OOV_OR_EOS and accuracy_masks
    preprocessing   DEFAULT_SEQUENCE_LENGTH, DEFAULT_EVAL_BATCH_SIZE, make_train_client_data,
                    make_eval_dataset: TFF's baseline preprocessing, without shuffling
    in_memory       TokenizedClients, load_tokenized_clients, InMemoryClientData,
                    make_train_client_data_in_memory: the same batches as
                    make_train_client_data, from one read of the database
    baselines       unigram_baseline_accuracy, bigram_baseline_accuracy

The data modules never import this module. To replace a function in a test, patch it in
the module that holds it (`monkeypatch.setattr(vocab, "count_train_words", f)`): the
functions of that module look it up there.
"""

from __future__ import annotations

from tasks.stackoverflow import baselines
from tasks.stackoverflow import database
from tasks.stackoverflow import in_memory
from tasks.stackoverflow import preprocessing
from tasks.stackoverflow import vocab as vocab_lib

DATABASE_FILENAME = database.DATABASE_FILENAME
SPLITS = database.SPLITS
check_database = database.check_database
load_client_data = database.load_client_data

TRAIN_WORD_COUNT_FILENAME = vocab_lib.TRAIN_WORD_COUNT_FILENAME
DEFAULT_VOCAB_SIZE = vocab_lib.DEFAULT_VOCAB_SIZE
DEFAULT_NUM_OOV_BUCKETS = vocab_lib.DEFAULT_NUM_OOV_BUCKETS
NUM_TOKENS = vocab_lib.NUM_TOKENS
ACCURACY = vocab_lib.ACCURACY
ACCURACY_WITHOUT_OOV = vocab_lib.ACCURACY_WITHOUT_OOV
ACCURACY_WITHOUT_OOV_OR_EOS = vocab_lib.ACCURACY_WITHOUT_OOV_OR_EOS
TokenIds = vocab_lib.TokenIds
token_ids = vocab_lib.token_ids
accuracy_masks = vocab_lib.accuracy_masks
read_word_counts = vocab_lib.read_word_counts
write_word_counts = vocab_lib.write_word_counts
count_train_words = vocab_lib.count_train_words
load_vocab = vocab_lib.load_vocab

DEFAULT_SEQUENCE_LENGTH = preprocessing.DEFAULT_SEQUENCE_LENGTH
DEFAULT_EVAL_BATCH_SIZE = preprocessing.DEFAULT_EVAL_BATCH_SIZE
make_train_client_data = preprocessing.make_train_client_data
make_eval_dataset = preprocessing.make_eval_dataset

TokenizedClients = in_memory.TokenizedClients
load_tokenized_clients = in_memory.load_tokenized_clients
InMemoryClientData = in_memory.InMemoryClientData
make_train_client_data_in_memory = in_memory.make_train_client_data_in_memory

unigram_baseline_accuracy = baselines.unigram_baseline_accuracy
bigram_baseline_accuracy = baselines.bigram_baseline_accuracy

__all__ = [
    "DATABASE_FILENAME", "SPLITS", "check_database", "load_client_data",
    "TRAIN_WORD_COUNT_FILENAME", "DEFAULT_VOCAB_SIZE", "DEFAULT_NUM_OOV_BUCKETS", "NUM_TOKENS",
    "ACCURACY", "ACCURACY_WITHOUT_OOV", "ACCURACY_WITHOUT_OOV_OR_EOS", "TokenIds", "token_ids",
    "accuracy_masks", "read_word_counts", "write_word_counts", "count_train_words",
    "load_vocab",
    "DEFAULT_SEQUENCE_LENGTH", "DEFAULT_EVAL_BATCH_SIZE", "make_train_client_data",
    "make_eval_dataset",
    "TokenizedClients", "load_tokenized_clients", "InMemoryClientData",
    "make_train_client_data_in_memory",
    "unigram_baseline_accuracy", "bigram_baseline_accuracy",
]
