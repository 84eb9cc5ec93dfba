/* page.S - chat.html inside the binary (GET /): one static file, no build step, no
 * generated C. The path is relative to the repository root, where make runs. */
    .section .rodata
    .global chat_page_html
    .global chat_page_html_end
chat_page_html:
    .incbin "tools/server/chat.html"
chat_page_html_end:
    .byte 0
    .section .note.GNU-stack,"",@progbits
